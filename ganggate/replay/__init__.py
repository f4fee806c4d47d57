"""The embedded demo and trace replay: what gang admission buys, in numbers.

Directly here, the commands: `cli` (`ganggate demo`, `ganggate replay`), `demo` (the demo's
story), `sweep` (`replay --sweep`) and `output` (where they print). The rest, by concern:

  traces/   the jobs a replay runs: the trace CSV format, synthetic traces, the Alibaba trace
  run/      running one: kubesim, the webhook and the controller in one process on simulated
            time, the replay loop, its pods, owners and injected disruptions
  results/  what a run measured: metrics, the report and plots, topology spans, whole gangs,
            autoscaled clusters' cost, the start predictions that held
"""
