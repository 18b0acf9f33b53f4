"""The Grafana dashboard (deploy/grafana/mailguard.json) and the Prometheus alert rules
(deploy/prometheus/alerts.yml): the dashboard's structure (validated against
tests/deploy/grafana_dashboard.schema.json, Grafana's dashboard model written down: Grafana
itself is not packaged for Debian), the rules through ``promtool check rules`` and ``promtool
test rules`` on the shipped files (Debian's prometheus package, installed by
``.ci/install-redis``: a missing ``promtool`` fails, never skips), and every metric either names
served by a real prefork worker's ``/metrics``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from celery import Celery
from celery.result import AsyncResult
from prometheus_client.parser import text_string_to_metric_families

from devservers.celery_worker import CeleryWorker, client_app, worker_env
from devservers.ports import free_port
from devservers.redis_servers import RedisServer
from devservers.smtp_server import SmtpTestServer
from tests.waiting import poll

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "mailguard.json"
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_CASES = ROOT / "deploy" / "prometheus" / "alerts.test.yml"
SCHEMA = Path(__file__).with_name("grafana_dashboard.schema.json")
DATASOURCE = "${DS_PROMETHEUS}"
TASK = "mailguard.send_mail"
THROTTLE = "454 4.7.0 Throttling failure: Maximum sending rate exceeded."

# --- the metric names of a PromQL expression --------------------------------------------------

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_OFFSET = re.compile(r"\boffset\s+-?\w+")
#: A whole identifier, not part of a number or a ``$variable``, not a function's name.
_NAME = re.compile(r"(?<![\w$.:])[A-Za-z_:][\w:]*(?![\w:])(?!\s*\()")
_KEYWORDS = {"and", "or", "unless", "bool", "inf", "nan", "group_left", "group_right", "on"}
_LABEL_VALUES = re.compile(r"^\s*label_values\((?P<expr>.*),\s*\w+\s*\)\s*$", re.DOTALL)


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects: identifiers outside strings, label matchers ``{}``,
    ranges ``[]`` and grouping clauses (``by (...)``), not followed by ``(``, not keywords.
    A Grafana ``label_values(<selector>, <label>)`` query gives its selector's names."""
    query = _LABEL_VALUES.match(expr)
    if query:
        expr = query["expr"]
    text = _STRINGS.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = _OFFSET.sub(" ", text)
    return {name for name in _NAME.findall(text) if name.lower() not in _KEYWORDS}


def test_metric_names_skip_functions_labels_strings_ranges_and_variables() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le, kind) (rate(a_bucket{job=~"$job",x="b_c"}'
        "[$__rate_interval]))) / on (kind) group_left (tier) b_total offset 5m"
        " > bool 1e3 unless c:rule or absent(d) and sum(e) without (f)"
    )
    assert metric_names(expr) == {"a_bucket", "b_total", "c:rule", "d", "e"}
    assert metric_names('label_values(m_total{job=~"$job"}, kind)') == {"m_total"}
    assert metric_names("vector(0)") == set()


# --- the dashboard ---------------------------------------------------------------------------


def load_dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def dashboard_exprs(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the dashboard: its panels' targets and its query variables."""
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            exprs.append(variable["query"]["query"])
    return exprs


def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_dashboard_is_an_importable_grafana_10_dashboard() -> None:
    """The datasource is the ``DS_PROMETHEUS`` input of an import and a variable of that name
    (file provisioning); the variables ask Prometheus for the jobs and kinds."""
    dashboard = load_dashboard()
    assert dashboard["uid"] == "mailguard" and dashboard["title"]
    assert dashboard["schemaVersion"] >= 36
    inputs = {i["name"]: i for i in dashboard["__inputs"]}
    assert inputs["DS_PROMETHEUS"]["type"] == "datasource"
    assert inputs["DS_PROMETHEUS"]["pluginId"] == "prometheus"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    assert {"job", "kind"} <= variables.keys()
    for name in ("job", "kind"):
        assert variables[name]["datasource"]["uid"] == DATASOURCE


def dashboard_errors(dashboard: Any) -> list[str]:
    """Where ``dashboard`` breaks the structure Grafana's dashboard model requires
    (tests/deploy/grafana_dashboard.schema.json), one line each; empty when it holds."""
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    return [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message[:160]}"
        for error in validator.iter_errors(dashboard)
    ]


def test_dashboard_has_the_structure_grafana_loads() -> None:
    """The dashboard as Grafana 10's dashboard model requires it (Grafana itself is not packaged
    for Debian; tests/deploy/grafana_dashboard.schema.json writes its structure down): known
    keys only, every panel with an integer id and a grid position inside the 24 columns, every
    target a Prometheus query with a refId, an expr and a datasource reference."""
    jsonschema.Draft202012Validator.check_schema(json.loads(SCHEMA.read_text()))
    assert dashboard_errors(load_dashboard()) == []


def _broken(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    dashboard = load_dashboard()
    change(dashboard)
    return dashboard


def _chart(dashboard: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in dashboard["panels"] if p["type"] != "row")


BROKEN: dict[str, Callable[[dict[str, Any]], object]] = {
    "a panel without gridPos": lambda d: _chart(d).pop("gridPos"),
    "a panel 25 columns wide": lambda d: _chart(d)["gridPos"].update(w=25),
    "a panel id as text": lambda d: _chart(d).update(id="2"),
    "a panel key misspelt": lambda d: _chart(d).update(gridpos=_chart(d)["gridPos"]),
    "a target without expr": lambda d: _chart(d)["targets"][0].pop("expr"),
    "a target without refId": lambda d: _chart(d)["targets"][0].pop("refId"),
    "a datasource without uid": lambda d: _chart(d)["datasource"].pop("uid"),
    "a row without its panels": lambda d: d["panels"][0].pop("panels"),
    "no templating": lambda d: d.pop("templating"),
    "an old schemaVersion": lambda d: d.update(schemaVersion=27),
}


@pytest.mark.parametrize("what", sorted(BROKEN))
def test_the_structure_check_refuses_a_broken_dashboard(what: str) -> None:
    """The check is not vacuous: each of these breakages of the shipped dashboard is refused."""
    assert dashboard_errors(_broken(BROKEN[what])) != [], what


def all_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside rows too (a collapsed row holds its panels)."""
    top = dashboard["panels"]
    return [*top, *(inner for p in top for inner in p.get("panels", []))]


def test_every_panel_has_a_title_description_unit_and_prometheus_targets() -> None:
    dashboard = load_dashboard()
    panels = dashboard["panels"]
    ids = [p["id"] for p in all_panels(dashboard)]
    assert len(set(ids)) == len(ids), "panel ids are unique, in rows too"
    charts = [p for p in panels if p["type"] != "row"]
    assert len(charts) >= 20
    assert len({p["title"] for p in charts}) == len(charts), "panel titles are unique"
    for panel in charts:
        where = panel["title"]
        assert panel["type"] in {"stat", "timeseries"}, where
        assert len(panel["description"]) > 40, where
        assert panel["datasource"]["uid"] == DATASOURCE, where
        assert panel["fieldConfig"]["defaults"]["unit"], where
        targets = panel["targets"]
        assert targets, where
        assert len({t["refId"] for t in targets}) == len(targets), where
        for target in targets:
            assert target["datasource"]["uid"] == DATASOURCE, where
            assert metric_names(target["expr"]), f"{where}: {target['expr']}"


def test_panels_lie_on_the_grid_without_overlapping() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in load_dashboard()["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


# --- the alert rules -----------------------------------------------------------------------


def promtool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run ``promtool`` with ``args``; fail (never skip) when it is not installed."""
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool is not installed: run `sh .ci/install-redis` (make test does)")
    return subprocess.run(
        [exe, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def test_rules_pass_promtool_check() -> None:
    """``promtool check rules``: the file's schema, each expression and annotation template."""
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_rules_fire_as_their_cases_say() -> None:
    """``promtool test rules alerts.test.yml`` on the shipped files, in their directory, as the
    dashboards guide says: each alert fires when, with the labels and the rendered annotations,
    its cases say; every alert has a case."""
    done = promtool("test", "rules", RULE_CASES.name, cwd=RULE_CASES.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
    cases = yaml.safe_load(RULE_CASES.read_text())["tests"]
    tested = {c["alertname"] for case in cases for c in case["alert_rule_test"]}
    assert tested == {rule["alert"] for rule in rules()}, "every alert has a case"


def test_every_rule_says_how_long_how_bad_and_what_to_do() -> None:
    """Each rule has ``for``, a severity and a summary and description; the operator's four
    conditions (parked mail overdue > 60 s, a long sender hold, the limiter unavailable, dead
    letters growing) each have a rule."""
    found = rules()
    for rule in found:
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning"}, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        assert len(rule["annotations"]["description"]) > 100, rule["alert"]
        assert metric_names(rule["expr"]), rule["alert"]
    by_name = {rule["alert"]: rule for rule in found}
    assert "> 60" in by_name["MailguardParkedMailOverdue"]["expr"]
    assert by_name["MailguardSenderHeldLong"]["for"] == "10m"
    assert 'backend="limiter"' in by_name["MailguardLimiterUnavailable"]["expr"]
    assert 'reason="poison"' in by_name["MailguardDeadLettersGrowing"]["expr"]


# --- every name is served by a real worker ---------------------------------------------------


def used_names() -> dict[str, set[str]]:
    """Metric name -> where it is used (a panel's title or an alert's name)."""
    used: dict[str, set[str]] = {}
    dashboard = load_dashboard()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            for name in metric_names(target["expr"]):
                used.setdefault(name, set()).add(panel["title"])
    for expr in dashboard_exprs(dashboard):
        for name in metric_names(expr):
            used.setdefault(name, set()).add("dashboard")
    for rule in rules():
        for name in metric_names(rule["expr"]):
            used.setdefault(name, set()).add(rule["alert"])
    return used


def served(port: int) -> tuple[set[str], set[str]]:
    """The sample names (``_total``, ``_bucket``...) and family names of ``/metrics``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        families = list(text_string_to_metric_families(reply.read().decode()))
    return {s.name for f in families for s in f.samples}, {f.name for f in families}


def _send(app: Celery, to: str, **kwargs: Any) -> AsyncResult:
    return app.send_task(TASK, args=[to], kwargs={"subject": "s", "body": "b"} | kwargs)


@pytest.fixture
def busy_worker(
    redis_url: str, own_redis: RedisServer, smtp_server: SmtpTestServer
) -> Iterator[tuple[Celery, int]]:
    """One prefork process serving metrics on a free loopback port; its limiter on a Redis of
    its own (``own_redis``, to stop), its ledger and schedule on ``redis_url``."""
    port = free_port()
    base = redis_url.rsplit("/", 1)[0]
    env = worker_env(
        redis_url,
        smtp_server.url,
        MAILGUARD_METRICS_PORT=f"127.0.0.1:{port}",
        MAILGUARD_LIMITER_URL=own_redis.url,
        MAILGUARD_LEDGER_URL=f"{base}/3",
        MAILGUARD_THROTTLE_HOLD="1s",
        MAILGUARD_LATE_TOLERANCE="100ms",
        MAILGUARD_REPUTATION="complaint 0.3%",  # the reputation gauges: senders counted
        MAILGUARD_WARMUP="warm.example.net: 1000",  # the warm-up gauges: a plan to show
    )
    worker = CeleryWorker(env, concurrency=1).start()
    app = client_app(env)
    yield app, port
    worker.stop()
    app.close()


@pytest.mark.slow
def test_every_metric_named_is_served_by_a_worker_and_every_family_is_charted(
    busy_worker: tuple[Celery, int], own_redis: RedisServer, smtp_server: SmtpTestServer
) -> None:
    """A worker that sent, deferred, re-booked (its one process busy on a slow SMTP reply at a
    booked slot), repeated, held (a throttling reply) and found its limiter down serves every
    series the dashboard and the rules name; each mailguard family served is on the dashboard."""
    app, port = busy_worker
    assert _send(app, "ada@example.com", mail_id="first").get(timeout=15)["status"] == "sent"
    booked = _send(app, "ada@example.com")
    poll(lambda: booked.state == "DEFERRED", 10, "a mail booked a second ahead")
    smtp_server.slow_data(3.0)  # the one process is busy past the booked slot: a re-booking
    slow = _send(app, "bob@example.com")
    repeated = _send(app, "ada@example.com", mail_id="first")
    for result in (slow, booked, repeated):
        result.get(timeout=20)
    smtp_server.fail_rcpt(THROTTLE, times=1)
    held = _send(app, "carol@example.com")
    assert held.get(timeout=20)["status"] == "sent"
    own_redis.stop()
    down = _send(app, "dave@example.com")
    poll(lambda: down.state == "DEFERRED", 15, "a mail deferred while the limiter is down")
    assert down.info["reason"] == "limiter_unavailable", down.info
    own_redis.start()

    used = used_names()
    samples, families = served(port)
    missing = {name: sorted(where) for name, where in used.items() if name not in samples}
    assert not missing, f"named but not served: {missing}; served: {sorted(samples)}"
    ours = {f for f in families if f.startswith("mailguard_")}
    assert len(ours) >= 11
    charted = {name for expr in dashboard_exprs(load_dashboard()) for name in metric_names(expr)}
    uncharted = {f for f in ours if not any(name.startswith(f) for name in charted)}
    assert not uncharted, f"served but on no panel or rule: {sorted(uncharted)}"
