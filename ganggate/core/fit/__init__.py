"""What fits where, the lowest layer of the core: quantities and a pod's effective request
(resources), which nodes a pod may use (nodematch), and GPU cards shared by memory (gpushare).
Pure; imports nothing else of the core.
"""
