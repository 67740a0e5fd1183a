"""deploy/monitoring: every PromQL expression of the Grafana dashboard and the alert rules queries
metrics our processes export, with a compatible type and labels they carry.

The metric names, types and labels come from the processes' own registries (worker_agent.metrics and
manager.metrics, with the API clients' collector), each series populated once so its labels show.
The expressions are read by a small PromQL parser: a tokenizer that drops strings (label values),
range and subquery brackets and Grafana variables, and a precedence parser that knows the function
names, aggregation operators and the by/without/on/ignoring/group_left/group_right/bool/offset
keywords, so only metric names and label names are checked. Label sets are followed through
aggregations, histogram_quantile and vector matching, so a `by (...)` label must exist on what is
aggregated. With promtool in the project's binary cache, `promtool check rules` runs on the rules
and `promtool test rules` fires each alert on made-up series.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from helm_kit import CACHE, versions
from prometheus_client import CollectorRegistry

from kube_runtime.clock import FakeClock
from kueue_domain.metrics import ClientRequestsCollector
from manager import manager as manager_module
from manager.metrics import STAGES, ManagerMetrics
from worker_agent.metrics import METRICS, Metrics

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "monitoring"
DASHBOARD = MONITORING / "grafana-dashboard.json"
RULES = MONITORING / "alert-rules.yaml"
RULE_CR = MONITORING / "prometheus-rule.yaml"

# promtool as `make build-promtool` builds it into the fleet's binary cache (docs/metrics.md).
PROMTOOL_VERSION = versions()["PROMTOOL_VERSION"]
PROMTOOL = CACHE / "bin" / f"promtool-{PROMTOOL_VERSION}" / "promtool"
NO_PROMTOOL = f"promtool {PROMTOOL_VERSION} is not in the binary cache: make build-promtool"

# Labels Prometheus adds to every scraped series, and the series it makes for each target itself.
TARGET_LABELS = frozenset({"job", "instance"})
SCRAPE_SERIES = {"up": "gauge"}

# ---------------------------------------------------------------------------------------------
# What the processes export


@dataclass(frozen=True)
class Series:
    """One queryable series name: the family's type, which part of it, and its label names."""

    name: str
    family: str
    kind: str  # counter, gauge, histogram
    part: str  # "" for counters and gauges, else bucket/sum/count
    labels: frozenset[str]


def _fake_client(host: str) -> SimpleNamespace:
    return SimpleNamespace(host=host, request_counts={("GET", "workloads", "200"): 1})


def worker_agent_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    for spec in METRICS:
        if spec.labels:  # one child each, so the family's label names show in the exposition
            metrics[spec.name].labels(*["x"] * len(spec.labels))
    registry.register(ClientRequestsCollector({"main": _fake_client("https://127.0.0.1:6443")}))
    return registry


def manager_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    metrics = ManagerMetrics(registry, FakeClock())
    metrics.dispatched("cq", "worker1")
    metrics.admitted("cq", "worker1")
    metrics.set_cluster_connected("worker1", True)
    for stage in STAGES:
        metrics.stage("ns/wl", stage)
    # manager.Manager registers the same client collector on its registry.
    assert "ClientRequestsCollector" in inspect.getsource(manager_module.Manager.__init__)
    registry.register(ClientRequestsCollector({"main": _fake_client("https://127.0.0.1:6443")}))
    return registry


def series_of(registry: CollectorRegistry) -> dict[str, Series]:
    found: dict[str, Series] = {}
    for family in registry.collect():
        assert family.samples, f"{family.name}: no sample, so its labels are unknown to this test"
        for sample in family.samples:
            part = sample.name[len(family.name) + 1 :] if family.type == "histogram" else ""
            labels = frozenset(sample.labels)
            known = found.get(sample.name)
            if known is not None:
                labels |= known.labels
            found[sample.name] = Series(sample.name, family.name, family.type, part, labels)
    return found


def exported() -> dict[str, Series]:
    """Every series name either process exports, plus `up`; a name both export has one type."""
    catalog: dict[str, Series] = {}
    for registry in (worker_agent_registry(), manager_registry()):
        for name, series in series_of(registry).items():
            known = catalog.get(name)
            assert known is None or (known.kind, known.labels) == (series.kind, series.labels), name
            catalog[name] = series
    for name, kind in SCRAPE_SERIES.items():
        catalog[name] = Series(name, name, kind, "", frozenset())
    return {
        name: Series(s.name, s.family, s.kind, s.part, s.labels | TARGET_LABELS)
        for name, s in catalog.items()
    }


CATALOG = exported()

# ---------------------------------------------------------------------------------------------
# A small PromQL parser

AGGREGATIONS = {
    "sum", "avg", "count", "min", "max", "group", "stddev", "stdvar",
    "topk", "bottomk", "quantile", "count_values", "limitk", "limit_ratio",
}  # fmt: skip
AGGREGATIONS_WITH_PARAMETER = {"topk", "bottomk", "quantile", "count_values", "limitk", "limit_ratio"}
FUNCTIONS = {
    "abs", "absent", "absent_over_time", "avg_over_time", "ceil", "changes", "clamp", "clamp_max",
    "clamp_min", "count_over_time", "day_of_month", "day_of_week", "day_of_year", "days_in_month",
    "delta", "deriv", "exp", "floor", "histogram_quantile", "holt_winters", "hour", "idelta",
    "increase", "irate", "label_join", "label_replace", "last_over_time", "ln", "log10", "log2",
    "max_over_time", "min_over_time", "minute", "month", "predict_linear", "present_over_time",
    "quantile_over_time", "rate", "resets", "round", "scalar", "sgn", "sort", "sort_desc",
    "stddev_over_time", "stdvar_over_time", "sum_over_time", "time", "timestamp", "vector", "year",
}  # fmt: skip
COUNTER_FUNCTIONS = {"rate", "irate", "increase"}  # take a counter's range, handle its resets
RANGE_FUNCTIONS = {f for f in FUNCTIONS if f.endswith("_over_time")} | COUNTER_FUNCTIONS | {
    "delta", "deriv", "idelta", "predict_linear", "changes", "resets", "holt_winters",
}  # fmt: skip
NO_LABELS_FUNCTIONS = {"vector", "time", "absent", "absent_over_time"}
SCALAR_FUNCTIONS = {"scalar", "time"}
PRECEDENCE = {
    "or": 1, "and": 2, "unless": 2,
    "==": 3, "!=": 3, "<=": 3, "<": 3, ">=": 3, ">": 3,
    "+": 4, "-": 4, "*": 5, "/": 5, "%": 5, "atan2": 5, "^": 6,
}  # fmt: skip
SET_OPERATORS = {"and", "or", "unless"}

TOKEN = re.compile(
    r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<var>\$\{[^}]*\}|\$\w+)
  | (?P<number>(?:0[xX][0-9a-fA-F]+|\d*\.?\d+(?:[eE][+-]?\d+)?)(?:(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*)?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>==|!=|>=|<=|=~|!~|[-+*/%^=<>@])
  | (?P<punct>[(){},])
    """,
    re.VERBOSE,
)


@dataclass
class Token:
    kind: str
    text: str


def tokenize(expr: str) -> list[Token]:
    tokens, pos = [], 0
    while pos < len(expr):
        match = TOKEN.match(expr, pos)
        if match is None:
            raise ValueError(f"cannot read {expr[pos : pos + 20]!r} in {expr!r}")
        pos = match.end()
        kind = match.lastgroup
        assert kind is not None
        if kind == "space":
            continue
        if kind == "var":
            kind = "number"  # a Grafana variable stands where a value would (e.g. a threshold)
        tokens.append(Token(kind, match.group()))
    return tokens


@dataclass
class Value:
    kind: str  # vector, range, scalar, string
    labels: frozenset[str] = frozenset()
    text: str = ""


@dataclass
class Parser:
    """Parses one expression; `metrics` collects the series names it reads, `errors` what is wrong."""

    catalog: dict[str, Series]
    tokens: list[Token] = field(default_factory=list)
    pos: int = 0
    metrics: set[str] = field(default_factory=set)
    labels: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)

    def parse(self, expr: str) -> Value:
        self.tokens, self.pos = tokenize(expr), 0
        value = self.expression(0)
        if self.pos != len(self.tokens):
            raise ValueError(f"unexpected {self.peek().text!r} in {expr!r}")
        return value

    # -- tokens

    def peek(self, ahead: int = 0) -> Token:
        index = self.pos + ahead
        return self.tokens[index] if index < len(self.tokens) else Token("end", "")

    def take(self, text: str | None = None) -> Token:
        token = self.peek()
        if token.kind == "end" or (text is not None and token.text != text):
            raise ValueError(f"expected {text or 'a token'}, found {token.text or 'the end'!r}")
        self.pos += 1
        return token

    def label_list(self) -> list[str]:
        self.take("(")
        names = []
        while self.peek().text != ")":
            token = self.take()
            if token.kind != "ident":
                raise ValueError(f"expected a label name, found {token.text!r}")
            names.append(token.text)
            self.labels.add(token.text)
            if self.peek().text == ",":
                self.take(",")
        self.take(")")
        return names

    def need(self, labels: list[str], have: frozenset[str], where: str) -> None:
        for label in labels:
            if label not in have:
                self.errors.append(f"{where}: label {label!r} is not on the series ({sorted(have)})")

    # -- expressions

    def expression(self, min_precedence: int, context: str | None = None) -> Value:
        left = self.unary(context)
        while True:
            op = self.peek().text
            precedence = PRECEDENCE.get(op) if self.peek().kind in ("op", "ident") else None
            if precedence is None or precedence < min_precedence:
                return left
            self.take()
            if self.peek().text == "bool":
                self.take()
            matching, on, group, included = None, [], None, []
            if self.peek().text in ("on", "ignoring"):
                matching = self.take().text
                on = self.label_list()
            if self.peek().text in ("group_left", "group_right"):
                group = self.take().text
                if self.peek().text == "(":
                    included = self.label_list()
            right = self.expression(precedence + (0 if op == "^" else 1))
            left = self.binary(op, left, right, matching, on, group, included)

    def binary(self, op, left, right, matching, on, group, included) -> Value:
        if left.kind != "vector" or right.kind != "vector":
            return left if left.kind == "vector" else right
        where = f"{op} {matching or ''}({', '.join(on)})"
        if matching == "on":
            self.need(on, left.labels, where + " left")
            self.need(on, right.labels, where + " right")
        elif matching == "ignoring":
            self.need(on, left.labels | right.labels, where)
        if group == "group_left":
            self.need(included, right.labels, f"group_left({', '.join(included)})")
            return Value("vector", left.labels | set(included))
        if group == "group_right":
            self.need(included, left.labels, f"group_right({', '.join(included)})")
            return Value("vector", right.labels | set(included))
        if op == "or":
            return Value("vector", left.labels | right.labels)
        if op in SET_OPERATORS:
            return left
        if matching == "on":
            return Value("vector", frozenset(on))
        if matching == "ignoring":
            return Value("vector", left.labels - set(on))
        return left

    def unary(self, context: str | None) -> Value:
        if self.peek().text in ("-", "+"):
            self.take()
            return self.unary(None)
        value = self.primary(context)
        while True:
            token = self.peek()
            if token.kind == "range":  # a subquery on a parenthesised expression or a function
                self.take()
                value = Value("range", value.labels)
            elif token.text == "offset":
                self.take()
                self.take()  # the duration
            elif token.text == "@":
                self.take()
                if self.take().text in ("start", "end"):
                    self.take("(")
                    self.take(")")
            else:
                return value

    def primary(self, context: str | None) -> Value:
        token = self.peek()
        if token.kind == "number":
            self.take()
            return Value("scalar")
        if token.kind == "string":
            self.take()
            return Value("string", text=token.text[1:-1])
        if token.text == "(":
            self.take()
            value = self.expression(0)
            self.take(")")
            return value
        if (
            token.kind == "ident"
            and token.text in AGGREGATIONS
            and self.peek(1).text in ("(", "by", "without")
        ):
            return self.aggregation()
        if token.kind == "ident" and token.text in FUNCTIONS and self.peek(1).text == "(":
            return self.function()
        if token.kind == "ident" or token.text == "{":
            return self.selector(context)
        raise ValueError(f"unexpected {token.text!r}")

    def aggregation(self) -> Value:
        name = self.take().text
        grouping, labels = None, []
        if self.peek().text in ("by", "without"):
            grouping = self.take().text
            labels = self.label_list()
        self.take("(")
        if name in AGGREGATIONS_WITH_PARAMETER:
            self.expression(0)
            self.take(",")
        inner = self.expression(0)
        self.take(")")
        if grouping is None and self.peek().text in ("by", "without"):
            grouping = self.take().text
            labels = self.label_list()
        self.need(labels, inner.labels, f"{name} {grouping}")
        if grouping == "by":
            return Value("vector", frozenset(labels))
        if grouping == "without":
            return Value("vector", inner.labels - set(labels))
        return Value("vector", frozenset())

    def function(self) -> Value:
        name = self.take().text
        self.take("(")
        args: list[Value] = []
        while self.peek().text != ")":
            args.append(self.expression(0, context=name))
            if self.peek().text == ",":
                self.take(",")
        self.take(")")
        series = [a for a in args if a.kind in ("vector", "range")]
        if name in RANGE_FUNCTIONS and not any(a.kind == "range" for a in args):
            self.errors.append(f"{name}() needs a range vector")
        if name in SCALAR_FUNCTIONS:
            return Value("scalar")
        if name in NO_LABELS_FUNCTIONS or not series:
            return Value("vector", frozenset())
        labels = series[0].labels
        if name == "histogram_quantile":
            self.need(["le"], labels, "histogram_quantile")
            return Value("vector", labels - {"le"})
        if name in ("label_replace", "label_join"):
            strings = [a.text for a in args if a.kind == "string"]
            sources = strings[3:] if name == "label_join" else strings[2:3]
            self.labels.update(s for s in sources if s)
            self.need([s for s in sources if s], labels, name)
            return Value("vector", labels | {strings[0]})
        return Value("vector", labels)

    def selector(self, context: str | None) -> Value:
        name = self.take().text if self.peek().kind == "ident" else None
        matchers: list[str] = []
        if self.peek().text == "{":
            self.take("{")
            while self.peek().text != "}":
                label = self.take()
                if label.kind == "string":  # Prometheus 3's quoted metric name
                    name = label.text[1:-1]
                else:
                    matchers.append(label.text)
                    self.take()  # the operator
                    if self.take().kind != "string":
                        raise ValueError(f"label {label.text!r}: its value must be a string")
                if self.peek().text == ",":
                    self.take(",")
            self.take("}")
        has_range = self.peek().kind == "range"
        if has_range:
            self.take()
        if name is None:
            raise ValueError("a selector without a metric name")
        self.metrics.add(name)
        self.labels.update(m for m in matchers if m != "__name__")
        series = self.catalog.get(name)
        if series is None:
            hint = " (a histogram: query _bucket, _sum or _count)" if self._is_histogram(name) else ""
            self.errors.append(f"unknown metric {name!r}{hint}")
            return Value("range" if has_range else "vector", frozenset(matchers) | TARGET_LABELS)
        self.need([m for m in matchers if m != "__name__"], series.labels, name)
        cumulative = series.kind == "counter" or series.part in ("bucket", "sum", "count")
        if cumulative and context not in COUNTER_FUNCTIONS:
            self.errors.append(f"{name} is a {series.kind} {series.part}: read it with rate() or increase()")
        if not cumulative and context in COUNTER_FUNCTIONS:
            self.errors.append(f"{name} is a gauge: {context}() is for counters")
        return Value("range" if has_range else "vector", series.labels)

    def _is_histogram(self, name: str) -> bool:
        return any(s.family == name and s.kind == "histogram" for s in self.catalog.values())


def check(expr: str) -> Parser:
    parser = Parser(CATALOG)
    parser.parse(expr)
    return parser


# ---------------------------------------------------------------------------------------------
# The files


def rule_groups() -> list[dict]:
    return yaml.safe_load(RULES.read_text())["groups"]


def alert_rules() -> list[dict]:
    return [rule for group in rule_groups() for rule in group["rules"]]


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(board: dict) -> list[dict]:
    found = []
    for panel in board["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))  # a collapsed row keeps its panels inside
    return found


LABEL_VALUES = re.compile(r"^\s*label_values\((?:(?P<expr>.+),\s*)?(?P<label>\w+)\)\s*$", re.S)


def variable_query(variable: dict) -> str:
    query = variable.get("query", "")
    return query.get("query", "") if isinstance(query, dict) else query


def dashboard_expressions() -> list[tuple[str, str]]:
    board = dashboard()
    found = []
    for panel in panels(board):
        for target in panel.get("targets", []):
            found.append((f"panel {panel['title']!r} {target.get('refId', '')}", target["expr"]))
    return found


def rule_expressions() -> list[tuple[str, str]]:
    return [(f"alert {rule['alert']}", rule["expr"]) for rule in alert_rules()]


# ---------------------------------------------------------------------------------------------
# Tests: the registries and the parser


def test_the_catalog_holds_both_processes_metrics():
    assert CATALOG["kueue_pending_workloads"].kind == "gauge"
    assert CATALOG["kueue_admission_wait_time_seconds_bucket"].labels >= {"le", "cluster_queue"}
    assert CATALOG["multikueue_cluster_status"].labels == {"cluster", "status", "job", "instance"}
    assert CATALOG["kueue_federation_multikueue_dispatch_stage_seconds_count"].part == "count"
    assert CATALOG["rest_client_requests_total"].kind == "counter"
    assert "kueue_admission_wait_time_seconds" not in CATALOG  # a histogram has no series of its name


def test_the_parser_reads_metrics_and_labels_not_functions_keywords_or_values():
    parser = check(
        "histogram_quantile(0.99, sum by (le, stage) (rate(kueue_federation_multikueue_dispatch_stage_"
        'seconds_bucket{stage=~"dispatched|rate|kueue_nothing", job="$job"}[$__rate_interval]))) > 10'
        " and on (stage) sum without (instance) "
        "(rate(kueue_federation_multikueue_dispatch_stage_seconds_count[5m] offset 1h))"
    )
    assert parser.errors == []
    assert parser.metrics == {
        "kueue_federation_multikueue_dispatch_stage_seconds_bucket",
        "kueue_federation_multikueue_dispatch_stage_seconds_count",
    }
    assert parser.labels == {"le", "stage", "job", "instance"}


@pytest.mark.parametrize(
    ("expr", "error"),
    [
        ("kueue_no_such_metric", "unknown metric 'kueue_no_such_metric'"),
        ('sum(rate(kueue_admitted_workloads{cluster_queue="a"}[5m]))', "unknown metric"),
        ("rate(kueue_admission_wait_time_seconds[5m])", "a histogram: query _bucket"),
        ('kueue_pending_workloads{queue="a"}', "label 'queue' is not on the series"),
        ("sum by (cluster) (kueue_pending_workloads)", "label 'cluster' is not on the series"),
        ("sum by (le) (rate(kueue_admission_wait_time_seconds_sum[5m]))", "label 'le'"),
        (
            "histogram_quantile(0.9, sum by (cluster_queue) "
            "(rate(kueue_admission_wait_time_seconds_bucket[5m])))",
            "label 'le'",
        ),
        ("kueue_admitted_workloads_total", "read it with rate()"),
        ("sum(kueue_admission_wait_time_seconds_count)", "read it with rate()"),
        ("rate(kueue_pending_workloads[5m])", "is a gauge"),
        ("rate(rest_client_requests_total)", "needs a range vector"),
        (
            "sum by (cluster_queue) (kueue_pending_workloads) / on (cluster) sum by (cluster) "
            "(multikueue_cluster_status)",
            "label 'cluster' is not on the series",
        ),
        ("sum by (cluster_queue) (sum by (status) (kueue_pending_workloads))", "label 'cluster_queue'"),
    ],
)
def test_the_parser_refuses_what_our_processes_do_not_export(expr, error):
    parser = check(expr)
    assert any(error in e for e in parser.errors), parser.errors


def test_a_wrong_name_in_the_files_would_fail():
    """The negative case on the real files: one renamed metric in a rule is caught."""
    expr = rule_expressions()[0][1]
    parser = check(expr)
    assert parser.errors == [] and parser.metrics
    renamed = expr.replace(sorted(parser.metrics)[0], "kueue_renamed_metric", 1)
    assert any("unknown metric 'kueue_renamed_metric'" in e for e in check(renamed).errors)


# ---------------------------------------------------------------------------------------------
# Tests: the files


@pytest.mark.parametrize(("where", "expr"), rule_expressions() + dashboard_expressions())
def test_every_expression_queries_exported_metrics_and_labels(where, expr):
    parser = check(expr)
    assert parser.errors == [], f"{where}: {expr}"
    assert parser.metrics, f"{where} reads no metric"


def test_every_dashboard_variable_queries_exported_metrics_and_labels():
    variables = [v for v in dashboard()["templating"]["list"] if v["type"] == "query"]
    assert variables
    for variable in variables:
        match = LABEL_VALUES.match(variable_query(variable))
        assert match, f"variable {variable['name']}: not a label_values() query"
        parser = check(match["expr"])
        assert parser.errors == [] and parser.metrics, variable["name"]
        series = CATALOG[next(iter(parser.metrics))]
        assert match["label"] in series.labels, variable["name"]


def test_the_dashboard_covers_what_it_is_for():
    metrics: set[str] = set()
    for _, expr in dashboard_expressions():
        metrics |= check(expr).metrics
    for name in (
        "kueue_federation_multikueue_dispatch_stage_seconds_bucket",
        "multikueue_cluster_status",
        "kueue_pending_workloads",
        "kueue_local_queue_pending_workloads",
        "kueue_admitted_workloads_total",
        "kueue_admission_wait_time_seconds_bucket",
        "kueue_evicted_workloads_total",
        "kueue_preempted_workloads_total",
        "kueue_cluster_queue_resource_usage",
        "kueue_cluster_queue_nominal_quota",
        "rest_client_requests_total",
        "up",
    ):
        assert name in metrics, name
    board = dashboard()
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    assert board["uid"] and board["title"]
    for panel in panels(board):
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]


def test_the_alerts_cover_what_they_are_for_and_say_what_to_check():
    rules = {rule["alert"]: rule for rule in alert_rules()}
    assert {
        "KueueFederationTargetDown",
        "KueueFederationWorkerClusterInactive",
        "KueuePendingWorkloadsNotAdmitted",
        "KueueFederationDispatchLatencyHigh",
        "KueueFederationAPIClientErrors",
    } <= set(rules)
    duration = re.compile(r"^\d+[smh]$")
    for name, rule in rules.items():
        assert duration.match(rule["for"]), name
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["annotations"]["summary"].strip(), name
        assert "Check" in rule["annotations"]["description"], name


def test_the_prometheus_rule_holds_the_same_groups():
    resource = yaml.safe_load(RULE_CR.read_text())
    assert resource["apiVersion"] == "monitoring.coreos.com/v1"
    assert resource["kind"] == "PrometheusRule"
    assert resource["spec"]["groups"] == rule_groups()


def test_every_alert_is_described_in_the_docs():
    docs = (REPO / "docs" / "metrics.md").read_text()
    for rule in alert_rules():
        assert f"`{rule['alert']}`" in docs, rule["alert"]


@pytest.mark.skipif(
    not PROMTOOL.is_file(),
    reason=f"promtool {PROMTOOL_VERSION} is not in the binary cache: make build-promtool",
)
def test_promtool_checks_the_rules(tmp_path):
    binary = str(PROMTOOL)
    out = subprocess.run([binary, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr
    # And it does refuse a broken rule, so the check above means something.
    broken = tmp_path / "broken.yaml"
    broken.write_text(RULES.read_text().replace("== 0", "== ", 1))
    out = subprocess.run([binary, "check", "rules", str(broken)], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0


# `promtool test rules` cases: input series, and which alerts fire (with their labels) at a time.
MANAGER_JOB = 'job="kueue-federation-manager-metrics"'
AGENT_JOB = 'job="kueue-worker-agent-metrics"'
STAGE_BUCKET = "kueue_federation_multikueue_dispatch_stage_seconds_bucket"
PROMTOOL_CASES = [
    {
        "input_series": [
            {"series": f'up{{{AGENT_JOB}, instance="a:8080"}}', "values": "1 0x20"},
            {"series": f'up{{{AGENT_JOB}, instance="b:8080"}}', "values": "1x20"},
        ],
        "alerts": [
            ("3m", "KueueFederationTargetDown", []),
            (
                "10m",
                "KueueFederationTargetDown",
                [{"job": "kueue-worker-agent-metrics", "instance": "a:8080"}],
            ),
            ("15m", "KueueFederationManagerAbsent", [{}]),
        ],
    },
    {
        "input_series": [{"series": f'up{{{MANAGER_JOB}, instance="m:8080"}}', "values": "1x20"}],
        "alerts": [("15m", "KueueFederationManagerAbsent", [])],
    },
    {
        "input_series": [
            {"series": 'multikueue_cluster_status{cluster="w1", status="inactive"}', "values": "0 0 1x20"},
            {"series": 'multikueue_cluster_status{cluster="w1", status="active"}', "values": "1 1 0x20"},
            {"series": 'multikueue_cluster_status{cluster="w2", status="inactive"}', "values": "0x20"},
            {"series": 'multikueue_cluster_status{cluster="w2", status="active"}', "values": "1x20"},
        ],
        "alerts": [
            ("5m", "KueueFederationWorkerClusterInactive", []),
            ("8m", "KueueFederationWorkerClusterInactive", [{"cluster": "w1"}]),
        ],
    },
    {
        # Every workload takes 10 to 30 s in each stage: slow, but remote_admitted does not count.
        "input_series": [
            {"series": f'{STAGE_BUCKET}{{stage="{stage}", le="{le}"}}', "values": values}
            for stage in ("dispatched", "remote_admitted")
            for le, values in (("1", "0x40"), ("10", "0x40"), ("30", "0+10x40"), ("+Inf", "0+10x40"))
        ],
        "alerts": [
            ("10m", "KueueFederationDispatchLatencyHigh", []),
            ("30m", "KueueFederationDispatchLatencyHigh", [{"stage": "dispatched"}]),
        ],
    },
    {
        # cq-a and cq-b pile up; only cq-b admits. cq-c is steady.
        "input_series": [
            {"series": 'kueue_pending_workloads{cluster_queue="cq-a", status="active"}', "values": "1+1x60"},
            {
                "series": 'kueue_pending_workloads{cluster_queue="cq-a", status="inadmissible"}',
                "values": "0x60",
            },
            {"series": 'kueue_pending_workloads{cluster_queue="cq-b", status="active"}', "values": "1+1x60"},
            {"series": 'kueue_admitted_workloads_total{cluster_queue="cq-b"}', "values": "0+1x60"},
            {"series": 'kueue_pending_workloads{cluster_queue="cq-c", status="active"}', "values": "5x60"},
        ],
        "alerts": [
            ("10m", "KueuePendingWorkloadsNotAdmitted", []),
            ("40m", "KueuePendingWorkloadsNotAdmitted", [{"cluster_queue": "cq-a"}]),
        ],
    },
    {
        "input_series": [
            {
                "series": 'kueue_cluster_queue_status{cluster_queue="cq-a", status="pending"}',
                "values": "1x20",
            },
            {
                "series": 'kueue_cluster_queue_status{cluster_queue="cq-b", status="pending"}',
                "values": "0x20",
            },
        ],
        "alerts": [("15m", "KueueClusterQueueNotActive", [{"cluster_queue": "cq-a"}])],
    },
    {
        # 10% of the manager's requests to w1 fail with 503; those to w2 all succeed.
        "input_series": [
            {
                "series": f'rest_client_requests_total{{{MANAGER_JOB}, host="w1:6443", code="200"}}',
                "values": "0+90x40",
            },
            {
                "series": f'rest_client_requests_total{{{MANAGER_JOB}, host="w1:6443", code="503"}}',
                "values": "0+10x40",
            },
            {
                "series": f'rest_client_requests_total{{{MANAGER_JOB}, host="w2:6443", code="200"}}',
                "values": "0+90x40",
            },
        ],
        "alerts": [
            (
                "25m",
                "KueueFederationAPIClientErrors",
                [{"job": "kueue-federation-manager-metrics", "host": "w1:6443"}],
            ),
        ],
    },
]


@pytest.mark.skipif(
    not PROMTOOL.is_file(),
    reason=f"promtool {PROMTOOL_VERSION} is not in the binary cache: make build-promtool",
)
def test_promtool_unit_tests_the_alerts(tmp_path):
    """The alerts fire on made-up series, with their labels, and stay quiet where they should. The
    annotations are left out of the copy tested here (check rules above renders their templates)."""
    groups = rule_groups()
    severity = {}
    for group in groups:
        for rule in group["rules"]:
            severity[rule["alert"]] = rule["labels"]["severity"]
            rule.pop("annotations")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    tests = [
        {
            "interval": "1m",
            "input_series": case["input_series"],
            "alert_rule_test": [
                {
                    "eval_time": at,
                    "alertname": name,
                    "exp_alerts": [{"exp_labels": labels | {"severity": severity[name]}} for labels in fired],
                }
                for at, name, fired in case["alerts"]
            ],
        }
        for case in PROMTOOL_CASES
    ]
    assert {name for case in PROMTOOL_CASES for _, name, _ in case["alerts"]} == set(severity)
    spec = tmp_path / "test.yaml"
    spec.write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests})
    )
    out = subprocess.run(
        [str(PROMTOOL), "test", "rules", str(spec)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert out.returncode == 0, out.stdout + out.stderr
