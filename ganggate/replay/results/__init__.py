"""What a replay measured, mostly pure functions over its records: `metrics` (utilisation,
waits, GPUs held idle), `report` (the table, summary.csv, timeseries.csv), `plot` (the PNG),
`topology` (spans over racks and blocks), `gangcheck` (is every gang whole), `autoscaling`
(what an autoscaled cluster costs) and `predictions` (how often start predictions held)."""
