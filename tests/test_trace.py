"""The trace CSV format: what loads, what is refused and why, and the round trip."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ganggate.replay.traces.format import COLUMNS, Job, TraceError, format_trace, load_trace, read_trace

HEADER = ",".join(COLUMNS)


def read(text: str) -> list[Job]:
    return read_trace(io.StringIO(text))


def test_reads_jobs_sorted_by_submit_time_with_quantities_kept():
    jobs = read(
        HEADER
        + "\n"
        + "late,30,4,1,500m,8Gi,600,0\n"
        + "# a comment is skipped\n"
        + "\n"
        + "early,0.5,1,8,2.5,64Gi,3600.5,7\n"
    )
    assert [j.job_id for j in jobs] == ["early", "late"]
    early = jobs[0]
    assert early.submit_time == 0.5 and early.run_time == 3600.5
    assert (early.pods, early.gpus_per_pod, early.gpus) == (1, 8, 8)
    assert (early.cpu_per_pod, early.memory_per_pod, early.priority) == ("2.5", "64Gi", 7)
    assert jobs[1].gpus == 4


def test_priority_column_is_optional():
    header = ",".join(c for c in COLUMNS if c != "priority")
    (job,) = read(header + "\nj1,0,2,1,1,1Gi,60\n")
    assert job.priority == 0


@pytest.mark.parametrize(
    "row, expected",
    [
        ("Bad_Id,0,1,1,1,1Gi,60,0", "line 2: job_id='Bad_Id'"),
        ("j,-1,1,1,1,1Gi,60,0", "line 2: submit_time='-1' must be 0 or more"),
        ("j,soon,1,1,1,1Gi,60,0", "line 2: submit_time='soon' is not a number"),
        ("j,0,0,1,1,1Gi,60,0", "line 2: pods='0' must be from 1"),
        ("j,0,1.5,1,1,1Gi,60,0", "line 2: pods='1.5' is not an integer"),
        ("j,0,1,1,lots,1Gi,60,0", "line 2: cpu_per_pod='lots' is not a Kubernetes quantity"),
        ("j,0,1,1,1,0,60,0", "line 2: memory_per_pod='0' must be greater than 0"),
        ("j,0,1,1,1,1Gi,0,0", "line 2: run_time='0' must be greater than 0"),
        ("j,0,1,1,1,1Gi,nan,0", "line 2: run_time='nan' must be greater than 0"),
        ("j,0,1,1,1,1Gi,60", "line 2: 7 fields where the header has 8"),
        ("j,0,1,1,,1Gi,60,0", "line 2: cpu_per_pod is empty"),
    ],
)
def test_bad_rows_are_refused_naming_line_and_column(row, expected):
    with pytest.raises(TraceError) as caught:
        read(HEADER + "\n" + row + "\n")
    assert expected in str(caught.value)


def test_repeated_job_id_names_both_lines():
    with pytest.raises(TraceError, match="line 3: job_id='a' repeats line 2"):
        read(HEADER + "\na,0,1,1,1,1Gi,60,0\na,5,1,1,1,1Gi,60,0\n")


def test_header_problems():
    with pytest.raises(TraceError, match="lacks column"):
        read("job_id,submit_time\nj,0\n")
    with pytest.raises(TraceError, match="unknown or repeated column.*colour"):
        read(HEADER + ",colour\nj,0,1,1,1,1Gi,60,0,red\n")
    with pytest.raises(TraceError, match="empty"):
        read("")
    with pytest.raises(TraceError, match="no jobs"):
        read(HEADER + "\n")


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(TraceError, match="cannot read trace"):
        load_trace(tmp_path / "absent.csv")


def test_format_then_load_round_trips(tmp_path):
    jobs = [
        Job("a", 0.0, 3, 1, "4", "16Gi", 120.0, 0),
        Job("b", 12.25, 1, 8, "500m", "1Ti", 7200.5, -3),
    ]
    path = tmp_path / "t.csv"
    path.write_text(format_trace(jobs))
    assert load_trace(path) == jobs


def test_sample_trace_is_what_its_documented_command_makes():
    from ganggate.replay.traces.synth import SynthConfig, generate

    jobs = load_trace(Path(__file__).resolve().parents[1] / "examples/traces/sample.csv")
    assert jobs == generate(SynthConfig(jobs=40, nodes=4, gpus_per_node=8, seed=2, load=1.5))
    assert any(j.pods > 1 for j in jobs)


job_ids = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
seconds = st.floats(min_value=0, max_value=1e7, allow_nan=False).map(lambda x: round(x, 3))


@settings(max_examples=60, deadline=None)
@given(st.lists(
    st.builds(
        Job,
        job_id=job_ids,
        submit_time=seconds,
        pods=st.integers(1, 10000),
        gpus_per_pod=st.integers(0, 16),
        cpu_per_pod=st.sampled_from(["1", "500m", "2.5", "64"]),
        memory_per_pod=st.sampled_from(["1Gi", "512Mi", "16Gi", "1Ti"]),
        run_time=seconds.filter(lambda x: x > 0),
        priority=st.integers(-1000, 1000),
    ),
    min_size=1, max_size=20, unique_by=lambda j: j.job_id,
))
def test_any_valid_trace_round_trips(jobs):
    assert read(format_trace(jobs)) == sorted(jobs, key=lambda j: j.submit_time)
