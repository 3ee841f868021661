"""The one grammar of the command line, shared by every command.

- A policy and its parameters are one *policy spec*, ``NAME`` or ``NAME?KEY=VALUE&KEY=VALUE``
  (``ifs-memoryless?w_wait=0.8``, ``ifs-counter?weights=models/weights/x``), the same in
  ``simulate --policy``, ``compare --policies``, ``evaluate --policies``, ``serve --policy``
  and ``policy set`` (``desched.bench.specs``). Quote it in a shell: ``?`` and ``&`` are
  special there.
- ``--store``: the service's state database (SQLite path or postgresql:// URL);
  ``--warehouse``: the DuckDB warehouse of ingested logs; ``--logs``: the decision-log folder
  (written by ``serve``, read by ``ingest``); ``--registry``: a model registry folder;
  ``--out``: where a command writes, used as given (nothing is nested under a second name);
  a run folder that already holds files is refused unless ``--force`` is given.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from desched.errors import DeschedError

POLICY_SPEC_HELP = "NAME or 'NAME?KEY=VALUE&KEY=VALUE' (see `desched policies`)"


def policy_spec(spec: str, option: str = "--policy") -> tuple[str, dict[str, str]]:
    """``"ifs-memoryless?w_wait=0.8"`` -> ``("ifs-memoryless", {"w_wait": "0.8"})``, validated
    against the policy's parameters; an error names ``option`` and the spec."""
    from desched.bench.specs import PolicySpec

    try:
        parsed = PolicySpec.parse(spec)
    except DeschedError as exc:
        raise DeschedError(f"{option} {spec!r}: {exc}") from None
    return parsed.name, dict(parsed.params)


def split_specs(values: Iterable[str]) -> list[str]:
    """Repeatable, comma-separated option values, in order, blanks dropped."""
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def existing_folder(path: Path, option: str) -> Path:
    """``path`` if it is a folder; else a one-line error naming the option."""
    if not path.is_dir():
        what = "is not a folder" if path.exists() else "does not exist"
        raise DeschedError(f"{option} {path}: {what}")
    return path


def fresh_folder(path: Path, force: bool, option: str = "--out") -> Path:
    """``path`` if it is absent or an empty folder, or ``force`` is set; else a one-line
    error naming the option and the folder (a run folder is never silently overwritten).
    The folder is then created and checked writable (``writable_folder``), so that a command
    fails before its work, not after it."""
    if path.exists() and not path.is_dir():
        raise DeschedError(f"{option} {path}: is a file, not a folder")
    if not force and path.is_dir() and any(path.iterdir()):
        raise DeschedError(f"{option} {path}: folder is not empty (give --force to write "
                           "over it, or another folder)")
    return writable_folder(path, option)


def own_folder(path: Path, own: Iterable[str], force: bool, option: str = "--out") -> Path:
    """``path`` if it is absent, empty, or holds only files named ``own`` (a command's own
    outputs, which it replaces: an earlier verdict, an earlier card), or ``force`` is set;
    else a one-line error naming the first other entry. Then ``writable_folder``."""
    if path.exists() and not path.is_dir():
        raise DeschedError(f"{option} {path}: is a file, not a folder")
    if not force and path.is_dir():
        other = sorted(p.name for p in path.iterdir() if p.name not in set(own))
        if other:
            raise DeschedError(f"{option} {path}: holds {other[0]!r}, which this command "
                               "does not write (give --force to write beside it, or another "
                               "folder)")
    return writable_folder(path, option)


def writable_folder(path: Path, option: str = "--out") -> Path:
    """``path``, once a probe file could be written in it (the folder and its missing parents
    created for the probe and removed again, so a command that fails later leaves nothing);
    else a one-line error naming the option, the path and why (a file in the way, no
    permission, a read-only file system)."""
    created = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".desched-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except FileExistsError:
        raise DeschedError(f"{option} {path}: a file is in the way of this folder") from None
    except OSError as exc:
        raise DeschedError(f"{option} {path}: cannot write here ({os_reason(exc)})") from None
    finally:
        for folder in created:  # the deepest first
            try:
                folder.rmdir()
            except OSError:
                break
    return path


def os_reason(exc: OSError) -> str:
    """An ``OSError`` in a few words: its ``strerror`` where it has one ("Permission
    denied"), else its message."""
    return exc.strerror or str(exc)


def written_over(inputs: dict[str, Path | None], outputs: Iterable[Path]) -> None:
    """A one-line error when a file a command is about to write is one of its ``inputs``
    (``{option: path}``), whatever the path's spelling or links: ``--force`` replaces a run
    folder's files, never the trace it was given."""
    for option, source in inputs.items():
        if source is None or not source.is_file():
            continue
        for path in outputs:
            if path.is_file() and os.path.samefile(path, source):
                raise DeschedError(f"{option} {source}: the command would write over it "
                                   f"({path}); copy it elsewhere or give another --out")


def trace_out(out: Path, option: str = "--out") -> Path:
    """``out``, a trace file to write, unless it is an SWF log's name or an existing file
    that is not a Parquet trace (which the write would destroy: a log, someone's notes);
    a Parquet file there is replaced, as a trace rewritten in place is."""
    from desched.swf import is_swf

    def parquet(path: Path) -> bool:
        with path.open("rb") as f:
            return f.read(4) == b"PAR1"

    if out.is_dir():
        raise DeschedError(f"{option} {out}: is a folder; name a .parquet file")
    if is_swf(out) or (out.is_file() and not parquet(out)):
        raise DeschedError(f"{option} {out}: an existing file that is not a Parquet trace, or "
                           "an SWF log's name; name a .parquet file")
    return out


def not_the_input(out: Path, source: Path, option: str = "--out") -> Path:
    """``out``, unless it names the same file as ``source`` (which the write would destroy)."""
    if out.resolve() == source.resolve():
        raise DeschedError(f"{option} {out}: is the input file; write to another file")
    return out
