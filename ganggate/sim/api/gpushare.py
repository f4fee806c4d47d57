"""The gpushare device plugin's extended resources (AliyunContainerService/gpushare-device-plugin const.go)."""

GPU_MEM = "aliyun.com/gpu-mem"
GPU_COUNT = "aliyun.com/gpu-count"
