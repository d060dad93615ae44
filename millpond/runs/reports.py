"""Gate reports under `$MILLPOND_LAKE/_reports/`: GX Data Docs per validation, plus one index page over time.

    _reports/index.html          per table: each expectation over the last runs, counts and links per run, a
                                 trend chart, then every validated batch, newest first
    _reports/history.jsonl       one JSON line per validated batch (what the index is rebuilt from)
    _reports/datadocs/...        the GX Data Docs site (one page per validated batch, failing-row samples)
    _reports/datadocs/static/vendor/...  the stylesheets and scripts those pages load (offline: no CDN)

Light on purpose (no Spark, no GX): the Airflow summary task and `millpond status` read these files too.
"""

from __future__ import annotations

import html
import importlib.util
import json
import os
import re
import shutil
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import quote

from millpond import settings
from millpond.lake import paths, storage
from millpond.lake.paths import LakePath
from millpond.runs.run_ids import is_cli_run_id


def reports_dir(root: LakePath | None = None) -> LakePath:
    return (root or paths.lake_root()) / "_reports"


def docs_dir(root: LakePath | None = None) -> LakePath:
    return reports_dir(root) / "datadocs"


def history_path(root: LakePath | None = None) -> LakePath:
    return reports_dir(root) / "history.jsonl"


def index_path(root: LakePath | None = None) -> LakePath:
    return reports_dir(root) / "index.html"


def validation_results_path(root: LakePath | None = None) -> LakePath:
    return paths.system_path("validation_results", root)


def record(entry: dict[str, Any]) -> LakePath:
    """Append one validated batch to the history and rebuild the index page; returns the index path."""
    target = history_path()
    line = json.dumps(entry, default=str) + "\n"
    storage.append_line(target, line)  # the history is the lake's: pipelines gating at once each add their line
    return write_index()


def history(root: LakePath | None = None) -> list[dict[str, Any]]:
    target = history_path(root)
    if not target.exists():
        return []
    return [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_index(root: LakePath | None = None) -> LakePath:
    entries = history(root)
    by_table: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for entry in entries:
        by_table[(entry["pipeline"], entry["table"])].append(entry)
    sections = [_section(pipeline, table, runs) for (pipeline, table), runs in sorted(by_table.items())]
    body = "\n".join(sections) or "<p>No gate has run yet.</p>"
    page = _PAGE.format(body=body, count=len(entries))
    target = index_path(root)
    storage.write_whole(target, page)
    return target


def summary_text(entry: dict[str, Any]) -> str:
    """The lines the runner and the Airflow task log print for one validated batch."""
    failing = [o for o in entry["expectations"] if not o["success"]]
    head = (
        f"gate {entry['suite']} on {entry['table']} batch {entry['batch_id']}: {entry['outcome'].upper()} "
        f"({entry['element_count']} rows, {entry.get('rows_dropped', 0)} quarantined)"
    )
    lines = [head] + [f"  {o['severity']:<4} {o['expectation']}: {o['unexpected_count']} unexpected" for o in failing]
    lines.append(f"  report: {entry['report_path']}")
    lines.append(f"  index:  {index_path()}")
    return "\n".join(lines)


def _e(value: Any) -> str:
    return html.escape(str(value))


def _section(pipeline: str, table: str, runs: list[dict[str, Any]]) -> str:
    runs = sorted(runs, key=lambda r: r["validated_at"], reverse=True)
    rows = []
    for r in runs:
        failing = [o for o in r["expectations"] if not o["success"]]
        problems = (
            "<br>".join(
                f'<span class="sev-{_e(o["severity"])}">{_e(o["severity"])}</span> {_e(o["expectation"])}: '
                f"{_e(o['unexpected_count'])} unexpected"
                for o in failing
            )
            or "none"
        )
        samples = "".join(
            f"<li><b>{_e(o['expectation'])}</b><pre>{_e(chr(10).join(o.get('samples') or []))}</pre></li>"
            for o in failing
            if o.get("samples")
        )
        sample_html = f"<details><summary>failing rows</summary><ul>{samples}</ul></details>" if samples else ""
        link = _relative_link(r.get("report_path"))
        rows.append(
            f'<tr class="{_e(r["outcome"])}"><td>{_e(r["validated_at"][:19].replace("T", " "))}</td>'
            f"<td>{_e(r['run_id'])}</td><td>{_e(r['mode'])}</td><td>{_e(r['batch_id'])}</td>"
            f'<td class="outcome">{_e(r["outcome"])}</td><td>{_e(r["element_count"])}</td>'
            f"<td>{_e(r.get('rows_dropped', 0))}</td><td>{problems}{sample_html}</td>"
            f"<td>{f'<a href={chr(34)}{_e(link)}{chr(34)}>Data Docs</a>' if link else ''}</td></tr>"
        )
    passed = sum(r["outcome"] != "failed" for r in runs)
    return (
        f"<section><h2>{_e(pipeline)} · {_e(table)}</h2><p>suite <code>{_e(runs[0]['suite'])}</code> · "
        f"{len(runs)} validated batches, {passed} passed (possibly with warnings or quarantined rows), "
        f"{len(runs) - passed} failed</p>"
        f"{_trend(list(reversed(runs[:40])))}"
        f"{_run_history(pipeline, runs)}"
        "<h3>validated batches</h3><table><thead><tr><th>validated (UTC)</th><th>run id</th><th>mode</th><th>batch</th><th>outcome</th>"
        "<th>rows</th><th>quarantined</th><th>failing expectations</th><th>report</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></section>"
    )


HISTORY_RUNS = 10  # runs per table in the index's history grid


def _run_history(pipeline: str, runs: list[dict[str, Any]], last: int = HISTORY_RUNS) -> str:
    """Per table, its last runs side by side (newest left): each expectation passed or failed (all batches of the run
    together), the rows validated and set aside, and links to the run's Data Docs and its Airflow run."""
    by_run: dict[str, list[dict[str, Any]]] = {}
    for entry in runs:  # newest first
        by_run.setdefault(entry["run_id"], []).append(entry)
    chosen = list(by_run.items())[:last]
    names: list[str] = []
    for _, batches in chosen:
        for batch in batches:
            names += [o["expectation"] for o in batch["expectations"] if o["expectation"] not in names]
    head = "".join(f"<th>{_e(run_id)}</th>" for run_id, _ in chosen)
    body = []
    for name in names:
        cells = []
        for _, batches in chosen:
            seen = [o for b in batches for o in b["expectations"] if o["expectation"] == name]
            if not seen:
                cells.append('<td class="none">–</td>')
            elif all(o["success"] for o in seen):
                cells.append('<td class="pass">✓ pass</td>')
            else:
                severity = seen[0]["severity"]
                unexpected = sum(int(o.get("unexpected_count") or 0) for o in seen if not o["success"])
                cells.append(f'<td class="fail sev-{_e(severity)}">✗ {_e(severity)} ({unexpected})</td>')
        body.append(f"<tr><th>{_e(name)}</th>{''.join(cells)}</tr>")

    def totals(label: str, key: str) -> str:
        values = "".join(f"<td>{sum(int(b.get(key) or 0) for b in batches)}</td>" for _, batches in chosen)
        return f'<tr class="totals"><th>{label}</th>{values}</tr>'

    docs, airflow, waiting = [], [], []
    for run_id, batches in chosen:
        waiting.append(f"<td>{_e(_backlog_text(batches[0].get('backlog')))}</td>")
        link = _relative_link(batches[0].get("report_path"))  # the run's newest batch
        docs.append(f'<td><a href="{_e(link)}">Data Docs</a></td>' if link else "<td></td>")
        # Airflow 3's UI route for a DAG run (the index is served by the Airflow plugin on the same host).
        url = f"/dags/{quote(pipeline, safe='')}/runs/{quote(run_id, safe='')}"
        from_airflow = "__" in run_id and not is_cli_run_id(run_id)
        airflow.append(f'<td><a href="{_e(url)}">Airflow run</a></td>' if from_airflow else "<td>–</td>")
    return (
        f'<table class="history"><caption>last {len(chosen)} run(s), newest first</caption>'
        f"<thead><tr><th>expectation</th>{head}</tr></thead><tbody>{''.join(body)}"
        f"<tr><th>waiting when the run started</th>{''.join(waiting)}</tr>"
        f"{totals('rows validated', 'element_count')}{totals('rows set aside (dropped or quarantined)', 'rows_dropped')}"
        f"<tr><th>report</th>{''.join(docs)}</tr><tr><th>Airflow</th>{''.join(airflow)}</tr></tbody></table>"
    )


def _backlog_text(backlog: dict[str, Any] | None) -> str:
    """A run's backlog for the table (millpond.lake.backlog) as the index shows it; – for runs recorded before it."""
    if not backlog:
        return "–"
    parts = [f"{backlog['files']} files"] if backlog.get("files") is not None else []
    if backlog.get("rows") is not None:
        parts.append(f"{backlog['rows']} rows")
    if backlog.get("batches") is not None:
        parts.append(f"{backlog['batches']} batch(es)")
    return ", ".join(parts) or "–"


def _trend(runs: list[dict[str, Any]]) -> str:
    """Inline SVG: one bar per validated batch (height = rows), coloured by outcome, oldest left."""
    if not runs:
        return ""
    width, height, bar = 12 * len(runs) + 10, 60, 10
    top = max(max(int(r["element_count"] or 0) for r in runs), 1)
    colours = {"passed": "#2e7d32", "warned": "#f9a825", "quarantined": "#6a1b9a", "failed": "#c62828"}
    bars = []
    for i, r in enumerate(runs):
        h = max(2, round(50 * int(r["element_count"] or 0) / top))
        bars.append(
            f'<rect x="{5 + 12 * i}" y="{55 - h}" width="{bar}" height="{h}" '
            f'fill="{colours.get(r["outcome"], "#888")}"><title>{_e(r["run_id"])} batch {_e(r["batch_id"])}: '
            f"{_e(r['outcome'])}, {_e(r['element_count'])} rows</title></rect>"
        )
    return (
        f'<svg class="trend" width="{width}" height="{height}" role="img" aria-label="rows validated per batch">'
        f"{''.join(bars)}</svg>"
    )


def _relative_link(report_path: str | None) -> str | None:
    if not report_path:
        return None
    base = str(reports_dir()) + "/"
    if report_path.startswith(base):
        return report_path[len(base) :]
    return Path(report_path).as_uri()


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>millpond data-quality gate</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; width: 100%; margin-bottom: 2em; font-size: 14px; }}
th, td {{ border: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }}
tr.failed td.outcome {{ color: #c62828; font-weight: bold; }}
tr.warned td.outcome {{ color: #f9a825; font-weight: bold; }}
tr.passed td.outcome {{ color: #2e7d32; }}
tr.quarantined td.outcome {{ color: #6a1b9a; font-weight: bold; }}
.sev-fail {{ color: #c62828; font-weight: bold; }} .sev-drop {{ color: #6a1b9a; }} .sev-warn {{ color: #f9a825; }}
pre {{ white-space: pre-wrap; font-size: 12px; margin: 0; }}
table.history {{ width: auto; }} table.history caption {{ text-align: left; color: #555; padding: 4px 0; }}
table.history thead th {{ font-weight: normal; font-size: 12px; }} tr.totals td {{ text-align: right; }}
td.pass {{ color: #2e7d32; }} td.fail {{ font-weight: bold; }} td.sev-fail {{ color: #c62828; }}
td.sev-warn {{ color: #f9a825; }} td.sev-drop {{ color: #6a1b9a; }} td.none {{ color: #999; }}
</style></head>
<body><h1>millpond data-quality gate</h1>
<p>{count} validated batches. Each run validates only the rows it adds; a failed <code>fail</code> expectation
keeps the batch out of the table and everything downstream.</p>
{body}
</body></html>
"""


# ---------------------------------------------------------------------------------------------- offline Data Docs

# What GX 1.24's Data Docs pages load from CDNs, and the same file in a WebJar (build/report-assets.pom.xml, which
# `make report-assets` unpacks under .cache/report-assets). The few without a WebJar are dropped (see the pom).
_WEBJARS = "META-INF/resources/webjars"
VENDORED = {
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": "bootstrap/4.3.1/css/bootstrap.min.css",
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": "bootstrap/4.3.1/js/bootstrap.min.js",
    "https://code.jquery.com/jquery-3.7.1.min.js": "jquery/3.7.1/jquery.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js": "popper.js/1.12.9/dist/umd/popper.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css": "font-awesome/6.6.0/css/all.min.css",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css": "bootstrap-table/1.19.1/dist/bootstrap-table.min.css",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js": "bootstrap-table/1.19.1/dist/bootstrap-table.min.js",
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css": "bootstrap-table/1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.css",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js": "bootstrap-table/1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css": "bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css",
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js": "bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js",
}
_FOLDERS = ("font-awesome/6.6.0/webfonts",)  # what a vendored stylesheet loads by relative URL
_EXTERNAL_IMAGE = re.compile(r"""(<img\b[^>]*?\bsrc=["'])https?://[^"'?]*?/([\w.-]+)(?:\?[^"']*)?(["'])""", re.I)
# GX links the favicon of a validation page one folder short of the site root: every static image, re-pointed.
_STATIC_IMAGE = re.compile(r"""(\b(?:src|href)=["'])(?:\.\./)*static/images/([\w.-]+)(["'])""", re.I)
_EXTERNAL_TAG = re.compile(r"""<(?:script|link)\b[^>]*?\b(?:src|href)=["']https?://[^>]*>(?:\s*</script>)?""", re.I)
_SRI = re.compile(r"""\s+(?:integrity|crossorigin)=["'][^"']*["']""", re.I)


def vendor_dir(docs: Path) -> Path:
    return docs / "static" / "vendor"


def copy_assets(docs: Path) -> Path | None:
    """The vendored files under the Data Docs site (once per site), so pages work from file:// and the plugin.

    None (and a warning) when they were never fetched: a report styled from CDNs is no reason to fail a gate.
    """
    source, target = settings.report_assets_dir() / _WEBJARS, vendor_dir(docs)
    missing = [name for name in VENDORED.values() if not (source / name).is_file()]
    if missing:
        print(
            f"millpond: warning: report assets not found in {source} (e.g. {missing[0]}): Data Docs pages keep "
            "loading their styles and scripts from CDNs. Fix: `make report-assets` (mvn, Maven Central)",
            file=sys.stderr,
        )
        return None
    # GX's own static files (its stylesheet, favicon, and the logo its pages fetch from S3), from the installed
    # package: GX copies them only when it builds its index, which would drop earlier runs' pages (quality.py).
    gx_static = _gx_static()
    if gx_static and not (docs / "static" / "images").exists():
        shutil.copytree(
            gx_static, docs / "static", dirs_exist_ok=True, copy_function=shutil.copyfile
        )  # new mtimes: uploaded
    for name in [*VENDORED.values(), *_FOLDERS]:
        if not (target / name).exists():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            if (source / name).is_dir():  # two gates may copy into one lake at once
                shutil.copytree(source / name, target / name, dirs_exist_ok=True, copy_function=shutil.copyfile)
            else:
                shutil.copyfile(source / name, target / name)
    return target


def localize_page(page: Path, docs: Path) -> None:
    """Point a Data Docs page at the vendored files; drop what loads from the internet and has no local copy."""
    text = page.read_text(encoding="utf-8")
    vendor = Path(os.path.relpath(vendor_dir(docs), page.parent)).as_posix()

    def local(match: re.Match) -> str:
        tag = match.group(0)
        url = next((u for u in VENDORED if u in tag), None)
        return _SRI.sub("", tag.replace(url, f"{vendor}/{VENDORED[url]}")) if url else ""

    images = Path(os.path.relpath(docs / "static" / "images", page.parent)).as_posix()

    def image(match: re.Match) -> str:
        name = match.group(2)
        found = (docs / "static" / "images" / name).is_file()
        return (
            f"{match.group(1)}{images}/{name}{match.group(3)}" if found else f"{match.group(1)}data:,{match.group(3)}"
        )

    localized = _EXTERNAL_IMAGE.sub(image, _EXTERNAL_TAG.sub(local, text))
    localized = _STATIC_IMAGE.sub(lambda m: f"{m.group(1)}{images}/{m.group(2)}{m.group(3)}", localized)
    if localized != text:
        page.write_text(localized, encoding="utf-8")


def _gx_static() -> Path | None:
    """great_expectations/render/view/static of the installed package (found without importing GX)."""
    spec = importlib.util.find_spec("great_expectations")
    if spec is None or not spec.origin:
        return None
    folder = Path(spec.origin).parent / "render" / "view" / "static"
    return folder if folder.is_dir() else None


def localize_data_docs(docs: Path, pages: list[Path]) -> None:
    """Data Docs that render offline: GX's pages load Bootstrap, jQuery, Font Awesome... from CDNs."""
    if copy_assets(docs) is None:
        return
    for page in pages:
        if page.is_file():
            localize_page(page, docs)


def external_loads(page: Path) -> list[str]:
    """The stylesheets, scripts and images a page would load from the internet (none, for a localized page)."""
    tags = re.findall(r"""<(?:script|link|img)\b[^>]*>""", page.read_text(encoding="utf-8"), re.I)
    return [t for t in tags if re.search(r"""\b(?:src|href)=["'](?:https?:)?//""", t, re.I)]
