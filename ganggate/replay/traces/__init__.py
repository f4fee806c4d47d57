"""The jobs a replay runs: `format` (the job-trace CSV: load, validate, write), `synth`
(synthetic traces shaped after published GPU-cluster studies) and `alibaba` (jobs from the
Alibaba GPU cluster trace)."""
