"""bench.request_codes: apiserver requests by verb, resource and code, per Job between two reads."""

from bench import prom
from bench.request_codes import per_job, request_rows


def _line(
    verb: str, resource: str, code: str, value: int, subresource: str = "", group: str = "batch"
) -> str:
    labels = f'code="{code}",group="{group}",resource="{resource}",subresource="{subresource}",verb="{verb}"'
    return f"apiserver_request_total{{{labels}}} {value}"


KUEUE = "kueue.x-k8s.io"
TEXT = "\n".join(
    [
        "# TYPE apiserver_request_total counter",
        _line("PUT", "jobs", "200", 10),
        _line("PUT", "jobs", "409", 4),
        _line("PATCH", "jobs", "200", 7, subresource="status"),
        _line("WATCH", "jobs", "200", 3),
        _line("GET", "pods", "200", 99, group=""),
        _line("APPLY", "workloads", "409", 2, subresource="status", group=KUEUE),
        _line("APPLY", "workloads", "200", 1, subresource="status", group=KUEUE),
        _line("APPLY", "workloads", "200", 5, subresource="status", group=KUEUE),
    ]
)


def test_rows_are_summed_by_verb_resource_and_code_without_lists_watches_or_other_kinds():
    rows = request_rows(prom.parse_prometheus_text(TEXT))
    assert rows == {
        ("PUT", "jobs", "200"): 10,
        ("PUT", "jobs", "409"): 4,
        ("PATCH", "jobs/status", "200"): 7,
        ("APPLY", "workloads/status", "409"): 2,
        ("APPLY", "workloads/status", "200"): 6,  # both series summed
    }


def test_per_job_is_the_difference_divided_and_a_reset_counter_counts_whole():
    before = {("PUT", "jobs", "200"): 10.0, ("PUT", "jobs", "409"): 4.0, ("GET", "jobs", "404"): 50.0}
    after = {("PUT", "jobs", "200"): 30.0, ("PUT", "jobs", "409"): 4.0, ("GET", "jobs", "404"): 6.0}
    assert per_job(before, after, jobs=10) == {("GET", "jobs", "404"): 0.6, ("PUT", "jobs", "200"): 2.0}
