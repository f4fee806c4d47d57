"""Running a replay: `stack` (kubesim, and for a gated mode the webhook and the controller, in one
process on a simulated clock), `engine` (the replay loop: events, settling, samples), `scenario`
(what a replay runs and gives back), `podtable` and `observe` (the replay's view of its pods),
`owners` (Jobs as the pods' owners) and `disruptions` (injected on the replay's clock)."""
