"""The research bench's report: ``report.json``, ``report.md``, ``report.html`` and PNG plots,
from the results of the demo's steps (``desched.bench.demo``). Pure: no Prefect, no
simulation, no training.

- ``inputs``: the records the demo's steps hand over;
- ``build``: ``report.json`` as a ``records.Report``, every figure of every question;
- ``answers``: the first page, one sentence and one figure per question;
- ``markdown``: ``report.md`` from the report alone, section by section;
- ``html``: ``report.html``, the same text for a browser, linking the PNGs beside it;
- ``plots``: the PNGs;
- ``numbers``: how numbers are printed, and the check that every number ``report.md``
  states is a number of ``report.json`` (the demo and its test run it);
- ``write``: the files, and the markdown with its images inlined for a Prefect artifact.

Which policy plays which part comes from settings (``inputs.Roles``) and from what the
policies declare (``desched.bench.roles``), never from a list of names. Adding a section
means a field of ``records.Report``, a builder in ``build`` and a renderer in ``markdown``.
"""
