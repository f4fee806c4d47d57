"""`ganggate demo` and `ganggate replay`: argument parsing and the thin shell around them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="play the 99-GPU story on an embedded cluster, without and with ganggate",
        description=(
            "Start kubesim, the webhook (with certificates made on the spot) and the gate controller in "
            "this process on loopback, and play the seed's story twice in simulated time: a 100-pod "
            "training job on 99 free GPUs plus a stream of small jobs, first with the default scheduler "
            "alone, then with ganggate. Prints a line per step and a comparison at the end."
        ),
    )
    from ganggate.replay.output import add_output_arguments

    demo.add_argument("--quiet", action="store_true", help="print only the summary")
    demo.add_argument("--no-color", action="store_true", help="no ANSI colours (also when NO_COLOR is set)")
    add_output_arguments(demo)
    demo.set_defaults(func=_demo)

    replay = subparsers.add_parser(
        "replay",
        help="replay a job trace on kubesim under none / count / ganggate admission",
        description=(
            "Replay a job trace (CSV: job_id,submit_time,pods,gpus_per_pod,cpu_per_pod,memory_per_pod,"
            "run_time,priority; see docs/replay.md) on an embedded kubesim cluster in simulated time, "
            "through the real webhook and controller, once per admission mode; write summary.csv, "
            "timeseries.csv and replay.png to --out and print the comparison."
        ),
        epilog=(
            "examples:\n"
            "  ganggate replay --synth --jobs 40 --nodes 4 --gpus-per-node 8 --seed 2 --load 1.5\n"
            "      a synthetic trace of 40 jobs on 4 nodes, under none, count and ganggate; files in replay-out/\n"
            "  ganggate replay --trace examples/traces/sample.csv --modes none,ganggate --out replay-out/sample\n"
            "      a trace of your own (the CSV columns above), two modes only\n"
            "  ganggate replay --synth --jobs 80 --disruptions drain=2,pod-failure=6\n"
            "      the same with node drains and pod failures (docs/replay.md)\n"
            "  ganggate replay --synth --jobs 40 --dra\n"
            "      GPUs as DRA devices, each pod claiming its own through a ResourceClaimTemplate"
        ),
        formatter_class=_ExamplesFormatter,
    )
    source = replay.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", type=Path, help="the trace CSV to replay")
    source.add_argument("--synth", action="store_true", help="generate a synthetic trace (replay/traces/synth.py)")
    source.add_argument("--alibaba", type=Path, metavar="POD_LIST_CSV",
                        help="an openb_pod_list_*.csv of the Alibaba GPU trace (each pod a one-pod job, or with "
                             "--gangs pods read as gangs; replay/traces/alibaba.py)")
    replay.add_argument("--limit", type=_positive_int,
                        help="with --alibaba: the first N jobs (pods, or gangs with --gangs) by creation time")
    replay.add_argument("--gangs", action="store_true",
                        help="with --alibaba: pods of the same shape created within --gang-window seconds of the "
                             "first of them are one gang (the trace records no gangs; docs/replay.md says why this "
                             "reading is fair)")
    replay.add_argument("--gang-window", type=_positive_float, default=None, metavar="SECONDS",
                        help="with --alibaba --gangs: the window (default 60)")
    replay.add_argument("--jobs", type=_positive_int, default=200, help="jobs of a synthetic trace (default 200)")
    replay.add_argument("--seed", type=int, default=1, help="seed of a synthetic trace (default 1)")
    replay.add_argument("--load", type=_positive_float, default=None,
                        help="offered load of a synthetic trace, GPU demand / capacity (default 0.9; with --starve, "
                             "of the small jobs' stream alone, default 0.75)")
    replay.add_argument("--starve", action="store_true",
                        help="with --synth: a starvation trace, a steady stream of 1-GPU jobs with a gang of half "
                             "the cluster's nodes after every 50 of them (replay/traces/synth.py StarveConfig)")
    replay.add_argument("--nodes", type=_positive_int, default=4, help="GPU nodes of the cluster (default 4)")
    replay.add_argument("--gpus-per-node", type=_positive_int, default=8, help="GPUs per node (default 8)")
    replay.add_argument("--node-cpu", default="64", help="CPU of each node (default 64)")
    replay.add_argument("--node-memory", default="512Gi", help="memory of each node (default 512Gi)")
    from ganggate.sim.cli import add_topology_arguments

    add_topology_arguments(replay)
    replay.add_argument("--require-share", type=float, default=0.0, metavar="SHARE",
                        help="with --synth and --topology: this share (0-1) of the multi-pod jobs requires one rack "
                             "(scheduling.k8s.io/group-topology-required; default 0)")
    replay.add_argument("--prefer-share", type=float, default=0.0, metavar="SHARE",
                        help="with --synth and --topology: this share (0-1) of the multi-pod jobs prefers one rack "
                             "(group-topology-preferred; default 0)")
    from ganggate.sim.cli import add_autoscaler_arguments

    add_autoscaler_arguments(replay)  # --node-group: an autoscaled cluster (replay/results/autoscaling.py)
    from ganggate.sim.cli import add_dra_arguments

    add_dra_arguments(replay)  # --dra: each job's pods claim their GPUs through a ResourceClaimTemplate
    replay.add_argument("--modes", default="none,count,ganggate",
                        help="comma-separated admission modes: none, count, ganggate, free (planner admits, "
                             "scheduler places), topology (needs --topology), provreq and placeholders (ganggate asking "
                             "the autoscaler of --node-group for room) (default none,count,ganggate)")
    replay.add_argument("--out", type=Path, default=Path("replay-out"), help="output directory (default replay-out)")
    replay.add_argument("--title", default="", help="title of the plot")
    replay.add_argument("--disruptions", default="", metavar="KIND=N,...",
                        help="inject disruptions, e.g. preempt=4,drain=2,node-failure=2,pod-failure=6, at times "
                             "drawn with --seed over the arrivals (see docs/replay.md); jobs become batch/v1 Jobs")
    replay.add_argument("--starvation-seconds", type=_positive_float, default=None, metavar="SECONDS",
                        help="the controller's starvation limit in simulated seconds (default: the controller's "
                             "own, 300): a gang that waits longer gets capacity held back")
    replay.add_argument("--starvation-blind-seconds", type=_positive_float, default=None, metavar="SECONDS",
                        help="the controller's limit for a hold where pods have no deadline (default: the "
                             "controller's own, 21600)")
    replay.add_argument("--sweep", default="", metavar="NAME=V1,V2,...",
                        help="instead of --modes: run ganggate once per value of starvation-seconds or "
                             "starvation-blind-seconds, and count, the guard off and the defaults, and plot mean "
                             "utilisation against the largest gang class's max wait (tradeoff.png, sweep.csv)")
    replay.add_argument("--deadline-factor", type=float, default=None, metavar="F",
                        help="give every pod spec.activeDeadlineSeconds = F x its job's run time (F >= 1: a run-time "
                             "bound users state, as Slurm's time limits; the starvation guard lets jobs that surely "
                             "end in time use room it holds). Default: no deadlines")
    replay.add_argument("--quiet", action="store_true",
                        help="print only the results table (no progress, no per-mode lines)")
    add_output_arguments(replay)
    replay.set_defaults(func=_replay)


class _ExamplesFormatter(argparse.HelpFormatter):
    """Wraps the description as usual, keeps the examples epilog's lines as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


def _component_log(args: argparse.Namespace) -> Any:
    """The components' log as the flags ask (replay.output): none, stderr, a file."""
    from ganggate.replay.output import ComponentLog

    return ComponentLog(verbose=args.verbose, path=args.log_file, level=getattr(args, "log_level", "INFO"))


def _end_note(logs: Any, quiet: bool) -> None:
    """Where the log went, or how many errors went unseen: last on stdout (stderr with --quiet)."""
    note = logs.note()
    if note:
        print(note, file=sys.stderr if quiet else sys.stdout)


def _demo(args: argparse.Namespace) -> int:
    from ganggate.replay.demo import run

    with _component_log(args) as logs:
        code = run(quiet=args.quiet, color=False if args.no_color else None)
    _end_note(logs, args.quiet)
    return code


def parse_modes(text: str) -> list[str]:
    from ganggate.replay.run.stack import MODES

    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise ValueError(f"--modes: unknown mode(s) {', '.join(unknown) or '(none given)'}; "
                         f"choose from {', '.join(MODES)}")
    return list(dict.fromkeys(modes))


def _replay(args: argparse.Namespace) -> int:
    import asyncio

    from ganggate.core.fit.resources import QuantityError, parse_quantity
    from ganggate.replay.results import report
    from ganggate.replay.results.plot import plot_modes
    from ganggate.replay.results.topology import markdown_table, required_line, summarise_topology, topology_nodes
    from ganggate.replay.run import engine
    from ganggate.replay.sweep import parse_sweep
    from ganggate.replay.traces.format import TraceError, load_trace, with_deadlines, write_trace
    from ganggate.replay.traces.synth import StarveConfig, SynthConfig, generate, generate_starving
    from ganggate.sim.cli import node_groups, topology_shape

    try:
        modes = parse_modes(args.modes)
        shape = topology_shape(args)
        if shape is not None:
            args.nodes = shape.nodes
        elif "topology" in modes:
            raise ValueError("--modes topology needs a cluster with a topology: --topology BLOCKSxRACKSxNODES")
        if args.starve and not args.synth:
            raise ValueError("--starve needs --synth")
        if (args.gangs or args.gang_window is not None) and args.alibaba is None:
            raise ValueError("--gangs and --gang-window need --alibaba")
        if args.gang_window is not None and not args.gangs:
            raise ValueError("--gang-window needs --gangs")
        if args.limit is not None and args.alibaba is None:
            raise ValueError("--limit needs --alibaba")
        if (args.require_share or args.prefer_share) and (shape is None or not args.synth or args.starve):
            raise ValueError("--require-share and --prefer-share need --synth and --topology (the racks to keep to)")
        for flag, value in (("--node-cpu", args.node_cpu), ("--node-memory", args.node_memory)):
            try:
                parse_quantity(value)
            except QuantityError:
                raise ValueError(f"{flag}={value!r} is not a Kubernetes quantity") from None
        if args.trace is not None:
            jobs = load_trace(args.trace)
            source = str(args.trace)
        elif args.alibaba is not None:
            from ganggate.replay.traces.alibaba import GANG_WINDOW, TRACE_HINT, load_alibaba, load_alibaba_gangs

            if not args.alibaba.exists():
                raise ValueError(f"cannot read {args.alibaba}: no such file. {TRACE_HINT}")
            if args.gangs:
                window = args.gang_window or GANG_WINDOW
                jobs = load_alibaba_gangs(args.alibaba, args.limit, window)
                source = f"{args.alibaba}, same-shape pods created within {window:g} s as one gang"
            else:
                jobs = load_alibaba(args.alibaba, args.limit)
                source = f"{args.alibaba}, one job per pod"
        elif args.starve:
            jobs = generate_starving(StarveConfig(jobs=args.jobs, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                                                  seed=args.seed, load=args.load or 0.75))
            source = f"starvation trace: {args.jobs} jobs, seed {args.seed}, stream load {args.load or 0.75:g}"
        else:
            args.load = args.load or 0.9
            jobs = generate(SynthConfig(jobs=args.jobs, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                                        seed=args.seed, load=args.load, require_share=args.require_share,
                                        prefer_share=args.prefer_share,
                                        topology_level=shape.rack_label if shape else "ganggate.io/rack"))
            source = f"synthetic: {args.jobs} jobs, seed {args.seed}, load {args.load:g}"
        jobs = with_deadlines(jobs, args.deadline_factor)
        product = _dra_product(args)
        nodes = engine.uniform_nodes(args.nodes, args.gpus_per_node, args.node_cpu, args.node_memory)
        if shape is not None:
            nodes = topology_nodes(shape, args.gpus_per_node, args.node_cpu, args.node_memory)
        planned = _disruptions(args, jobs, nodes)
        groups, autoscaler_options = node_groups(args)
        if any(m in ("provreq", "placeholders") for m in modes) and not groups:
            raise ValueError("--modes provreq and placeholders ask an autoscaler for nodes: give --node-group")
        scenario = engine.Scenario(jobs, nodes, disruptions=planned, topology_levels=shape.levels if shape else (),
                                   node_groups=groups, autoscaler=autoscaler_options, dra_product=product)
        engine.check_fits(scenario)
        sweep = parse_sweep(args.sweep) if args.sweep else None
    except (TraceError, ValueError, engine.ReplayError) as exc:
        print(f"ganggate replay: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    if args.trace is None:
        write_trace(jobs, args.out / "trace.csv")
    if sweep is not None:
        return _sweep(sweep, scenario, args, f"{len(jobs)} jobs ({source})")
    say = (lambda *_a, **_k: None) if args.quiet else print  # --quiet: the results table alone
    say(f"replaying {len(jobs)} jobs ({source}) on {args.nodes} nodes x {args.gpus_per_node} GPUs; "
        f"modes: {', '.join(modes)}", flush=True)

    async def run_all() -> dict[str, engine.RunResult]:
        from ganggate.replay.output import progress_bar

        results = {}
        for mode in modes:
            settings = {} if args.starvation_seconds is None else {"starvation_seconds": args.starvation_seconds}
            if args.starvation_blind_seconds is not None:
                settings["starvation_blind_seconds"] = args.starvation_blind_seconds
            bar = None if args.quiet else progress_bar(len(jobs), mode)  # on a terminal only
            try:
                result = await engine.run_scenario(scenario, mode, exact_webhook=False, controller_settings=settings,
                                                   on_step=bar)
            finally:
                if bar is not None:
                    bar.close()
            lost = f", {result.interruptions} runs lost to disruptions" if planned else ""
            say(f"  {mode}: {result.steps} steps, {result.summary.completed}/{result.summary.jobs} jobs "
                f"completed{lost}, {result.wall_seconds:.1f} s", flush=True)
            results[mode] = result
        return results

    with _component_log(args) as logs:
        try:
            results = asyncio.run(run_all())
        except engine.ReplayError as exc:
            print(f"ganggate replay: {exc}", file=sys.stderr)
            return 1
    summaries = [r.summary for r in results.values()]
    report.write_summary_csv(summaries, args.out / "summary.csv")
    report.write_timeseries_csv({m: r.samples for m, r in results.items()}, args.out / "timeseries.csv")
    report.write_jobs_csv({m: r.records for m, r in results.items()}, args.out / "jobs.csv")
    plot_modes({m: r.samples for m, r in results.items()}, scenario.capacity, args.out / "replay.png",
               title=args.title or f"{len(jobs)} jobs on {args.nodes} x {args.gpus_per_node} GPUs",
               ends={m: r.end for m, r in results.items()})
    say()
    print(report.markdown_table(summaries))
    say("\nJob by job (wait: submit -> all pods running; a job never started waits until the end):\n")
    say(report.jobs_table(summaries))
    if args.deadline_factor is not None:
        from ganggate.replay.results.predictions import score

        for mode, result in results.items():
            if mode != "none":
                say(f"  {mode}: {score(result.events, result.records, result.epoch_offset).describe()}")
    if scenario.node_groups:
        from ganggate.replay.results.autoscaling import markdown_table as paid_table
        from ganggate.replay.results.autoscaling import paid

        print("\nOn the autoscaled cluster (docs/replay.md):\n")
        print(paid_table([paid(m, r.provisioned, r.samples, r.records, r.end) for m, r in results.items()]))
    if shape is not None:
        print("\nPlacement on the topology (docs/replay.md):\n")
        print(markdown_table([summarise_topology(r.summary, jobs, r.records, scenario.nodes, shape.rack_label,
                                                 shape.block_label) for r in results.values()]))
        if any(job.topology_required for job in jobs):
            print()
            for mode, result in results.items():
                print(f"  {mode}: {required_line(jobs, result.records, scenario.nodes)}")
    say(f"\nwrote {args.out / 'summary.csv'}, {args.out / 'jobs.csv'}, {args.out / 'timeseries.csv'}, {args.out / 'replay.png'}"
        + (f", {args.out / 'trace.csv'}" if args.trace is None else ""))
    _end_note(logs, args.quiet)
    return 0


def _sweep(sweep: Any, scenario: Any, args: argparse.Namespace, source: str) -> int:
    """replay --sweep: the baselines and one ganggate run per value; sweep.csv and tradeoff.png."""
    import asyncio
    from dataclasses import replace

    from ganggate.replay.results import report
    from ganggate.replay.run import engine
    from ganggate.replay.sweep import run_sweep

    print(f"sweeping {sweep.parameter} over {', '.join(f'{v:g}' for v in sweep.values)} on {source}", flush=True)

    async def run(mode: str, settings: dict) -> Any:
        result = await engine.run_scenario(scenario, mode, exact_webhook=False, controller_settings=settings)
        print(f"  {mode} {settings or '(defaults)'}: {result.wall_seconds:.1f} s", flush=True)
        return result.summary

    try:
        rows = asyncio.run(run_sweep(sweep, run, args.out, title=args.title or source))
    except engine.ReplayError as exc:
        print(f"ganggate replay: {exc}", file=sys.stderr)
        return 1
    summaries = [replace(summary, mode=label) for label, summary in rows]  # the row's label in the tables
    print()
    print(report.markdown_table(summaries))
    print()
    print(report.jobs_table(summaries))
    print(f"\nwrote {args.out / 'sweep.csv'}, {args.out / 'tradeoff.png'}")
    return 0


def _dra_product(args: argparse.Namespace) -> str | None:
    """The DRA GPUs' productName (None without --dra); ValueError for what --dra does not replay."""
    from ganggate.sim.kubelet.dradriver import DEFAULT_PRODUCT

    if not args.dra:
        if args.dra_product:
            raise ValueError("--dra-product needs --dra")
        return None
    if args.node_group:
        raise ValueError("--dra does not replay an autoscaled cluster: the autoscaler's nodes publish "
                         "nvidia.com/gpu capacity, not DRA devices; leave out --node-group")
    if args.disruptions:
        raise ValueError("--dra does not replay --disruptions (its jobs' replacement pods and urgent pods are not "
                         "modelled with claims); leave out --disruptions")
    return args.dra_product or DEFAULT_PRODUCT


def _disruptions(args: argparse.Namespace, jobs: list, nodes: list) -> list:
    """The --disruptions schedule (empty without the flag); a bad flag raises ValueError."""
    from ganggate.replay.run.disruptions import parse, schedule

    counts = parse(args.disruptions)
    if not counts:
        return []
    horizon = max(j.submit_time for j in jobs) if jobs else 0.0
    return schedule(args.seed, horizon, [n.name for n in nodes], **{k.replace("-", "_"): n for k, n in counts.items()},
                    gpus=args.gpus_per_node)
