"""What an ingestion run did, over all files: totals, the one-line summary, and the report a
person reads (a markdown page and one table row per file)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desched.tables import table_lines
from desched.warehouse.audit import AuditResult
from desched.warehouse.ledger import Action, FileReport


@dataclass
class IngestSummary:
    """What one ingestion run did, over all files."""

    files_seen: int
    files_read: int
    files_quarantined: list[str]
    files_failed: dict[str, str]
    decisions_loaded: int
    completions_loaded: int
    quarantined_by_rule: dict[str, int]
    files: list[FileReport]
    counts: dict[str, int]
    gx_rows_checked: int = 0
    gx_unexpected: dict[str, int] = field(default_factory=dict)
    gx_error: str | None = None
    files_skipped: dict[str, str] = field(default_factory=dict)
    """Files under the logs folder that are not logs, with the reason (``ledger.survey``)."""

    @property
    def rows_loaded(self) -> int:
        return self.decisions_loaded + self.completions_loaded

    @property
    def rows_quarantined(self) -> int:
        return sum(self.quarantined_by_rule.values())

    def line(self) -> str:
        """The one-line summary the CLI prints."""
        rules = ", ".join(f"{k} {v}" for k, v in sorted(self.quarantined_by_rule.items()))
        text = (
            f"{self.files_read} of {self.files_seen} files read; {self.rows_loaded} rows loaded "
            f"({self.decisions_loaded} decisions, {self.completions_loaded} completions); "
            f"{self.rows_quarantined} rows quarantined" + (f" ({rules})" if rules else "")
        )
        if self.files_quarantined:
            text += f"; {len(self.files_quarantined)} files quarantined whole"
        if self.files_failed:
            text += f"; {len(self.files_failed)} files failed"
        if self.files_skipped:
            text += (f"; {len(self.files_skipped)} files skipped (not logs, copies of loaded "
                     "ones, or loaded by another run)")
        if self.gx_error:
            text += "; GX audit failed"
        return text

    def skipped_lines(self, root: str | None = None) -> list[str]:
        """One line per skipped file: its path (relative to ``root`` when under it) and why."""
        def shown(path: str) -> str:
            if root is not None:
                try:
                    return str(Path(path).relative_to(Path(root).resolve()))
                except ValueError:
                    pass
            return path

        return [f"skipped {shown(p)}: {why}" for p, why in self.files_skipped.items()]


def summarize(
    reports: Sequence[FileReport],
    files_seen: int,
    failed: dict[str, str],
    counts: dict[str, int],
    audit: AuditResult | None = None,
) -> IngestSummary:
    """Totals of a run from its file reports and its GX audit (of the samples, or of every
    row as the files loaded)."""
    by_rule: dict[str, int] = {}
    gx_unexpected = dict(audit.unexpected) if audit else {}
    for r in reports:
        for rule, n in r.quarantined.items():
            if n:
                by_rule[rule] = by_rule.get(rule, 0) + n
        for rule, n in r.gx_unexpected.items():
            gx_unexpected[rule] = gx_unexpected.get(rule, 0) + n
    idle = (Action.TOUCHED.value, Action.SKIPPED.value)
    return IngestSummary(
        files_seen=files_seen,
        files_read=sum(1 for r in reports if r.action not in idle),
        files_quarantined=[r.path for r in reports if r.file_rule],
        files_failed=dict(failed),
        decisions_loaded=sum(r.decisions_loaded for r in reports),
        completions_loaded=sum(r.completions_loaded for r in reports),
        quarantined_by_rule=by_rule,
        files=list(reports),
        counts=counts,
        gx_rows_checked=sum(r.audited_rows for r in reports),
        gx_unexpected=gx_unexpected,
        files_skipped={
            r.path: r.detail or "" for r in reports if r.action == Action.SKIPPED.value
        },
    )


def report_table(summary: IngestSummary) -> list[dict[str, Any]]:
    """One row per file handled, for a table artifact."""
    return [
        {
            "file": r.path,
            "action": r.action,
            "records_read": r.records_read,
            "decisions_loaded": r.decisions_loaded,
            "completions_loaded": r.completions_loaded,
            "rows_quarantined": r.rows_quarantined,
            "quarantined_whole": r.file_rule or "",
            "detail": r.detail or "",
            "gx_audited_rows": r.audited_rows,
            "pending_bytes": r.pending_bytes,
            "seconds": round(r.seconds, 3),
        }
        for r in summary.files
    ] + [
        {"file": path, "action": "failed", "detail": error}
        for path, error in summary.files_failed.items()
    ]


def report_markdown(summary: IngestSummary, logs_dir: str, db_path: str) -> str:
    """The run's totals and quarantine by rule, as markdown."""
    agrees = f"no: {summary.gx_error}" if summary.gx_error else "yes"
    lines = [
        "# Log ingestion",
        "",
        f"Logs `{logs_dir}` into warehouse `{db_path}`.",
        "",
        *table_lines(["", ""], [
            ("files seen", summary.files_seen),
            ("files read", summary.files_read),
            ("rows loaded", summary.rows_loaded),
            ("decisions loaded", summary.decisions_loaded),
            ("completions loaded", summary.completions_loaded),
            ("rows quarantined", summary.rows_quarantined),
            ("files quarantined whole", len(summary.files_quarantined)),
            ("files failed", len(summary.files_failed)),
            ("files skipped (not logs, copies, loaded by another run)",
             len(summary.files_skipped)),
            ("rows re-checked by Great Expectations", summary.gx_rows_checked),
            ("Great Expectations agrees with the rules", agrees),
        ], "lr"),
        "",
        "## Rows quarantined by rule",
        "",
        *table_lines(["rule", "rows"], sorted(summary.quarantined_by_rule.items()), "lr"),
    ]
    if summary.files_quarantined:
        lines += ["", "## Files quarantined whole", ""]
        lines += [
            f"- `{r.path}`: {r.file_rule} ({r.detail})" for r in summary.files if r.file_rule
        ]
    if summary.files_skipped:
        lines += ["", "## Files skipped (not decision logs)", ""]
        lines += [f"- `{p}`: {why}" for p, why in summary.files_skipped.items()]
    if summary.files_failed:
        lines += ["", "## Files that failed (rolled back; read again next run)", ""]
        lines += [f"- `{p}`: {e}" for p, e in summary.files_failed.items()]
    lines += ["", "## Warehouse rows", ""]
    lines += table_lines(["table", "rows"], summary.counts.items(), "lr")
    return "\n".join(lines) + "\n"
