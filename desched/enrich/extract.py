"""Key fields of a receipt from its OCR lines: company, date and total (rules, no model).

- company: the first of the top ``COMPANY_LINES`` lines that carries a company suffix
  (SDN BHD, BHD, ENTERPRISE, TRADING, ...); failing that, the first line of mostly letters
  that is not a document header (TAX INVOICE, RECEIPT, ...) nor an address. A suffix alone
  on its line (``SDN BHD``) joins the line before it; a line ending in ``&`` joins the next.
  A registration number at the end (``(123456-X)``) is dropped.
- date: the first date-shaped token (day/month/year in digits with ``/``, ``-`` or ``.``;
  year-month-day; day month-name year; month/day/year when the middle number exceeds 12),
  preferring lines that mention DATE; returned as printed.
- total: the largest amount printed after a total label (GRAND TOTAL, TOTAL AMOUNT, NETT
  TOTAL, TOTAL, ...; never SUB TOTAL, TOTAL QTY, TOTAL GST/TAX, nor a label that says EXCL),
  on the label's line or within the next ``TOTAL_LOOKAHEAD`` lines (OCR often puts the value
  on its own line; a line of words in between ends the search), above any GST/TAX SUMMARY
  table; an explicit ROUNDED TOTAL close to it wins. When the receipt shows a rounding
  adjustment, the adjusted amount (or the amount rounded to 0.05, Malaysian cash rounding)
  wins if it is printed too. Without any labelled amount: the largest amount printed at
  least twice, else the largest.

Accuracy on SROIE is measured by ``score`` (exact match after ``normalise_*``); see
docs/enrichment.md. Cost: linear in the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date as Date

COMPANY_LINES = 10
TOTAL_LOOKAHEAD = 4

COMPANY_SUFFIX = re.compile(
    r"\b(SDN\.?\s*BHD|S/B|BHD|BERHAD|ENTERPRISES?|TRADING|HARDWARE|RESTAURANT|RESTORAN|"
    r"STATIONERY|SUPERMARKET|MARKETING|CORPORATION|HOLDINGS|INDUSTRIES|BOOKSTORE|"
    r"PHARMACY|KEDAI|SYARIKAT|PERNIAGAAN|COMPANY|LIMITED|LTD|PLT|SERVICES|"
    r"MART|BAKERY|CAFE|STORE|SHOP|GIFT|ELECTRICAL|MOTOR|FOOD|(?:\(M\)))\b\.?",
    re.IGNORECASE,
)
HEADER = re.compile(
    r"^(TAX\s*INVOICE|INVOICE|RECEIPT|OFFICIAL\s*RECEIPT|CASH\s*(BILL|SALES?)|SIMPLIFIED|"
    r"WELCOME|THANK|GST|TEL|FAX|CO\.?\s*REG|COMPANY\s*REG|\(|GOODS|LOT\b|NO\b|JALAN|TAMAN)",
    re.IGNORECASE,
)
REG_NO = re.compile(
    r"\s*[\(\[]?\s*(CO\.?\s*(REG\.?\s*)?(NO)?\.?\s*:?\s*)?\d{3,}[-\s]?[A-Z]\s*[\)\]]?\s*$"
)

MONTHS = {
    m: i + 1
    for i, m in enumerate(
        ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
    )
}
DATE_PATTERNS = (
    re.compile(r"(?<!\d)(\d{1,2})\s*([/.-])\s*(\d{1,2})\s*\2\s*(\d{4}|\d{2})(?!\d)"),
    re.compile(r"(?<!\d)(\d{4})([/.-])(\d{1,2})\2(\d{1,2})(?!\d)"),
    re.compile(
        r"(?<!\d)(\d{1,2})[\s/-]*(JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC)[A-Z]*[\s,/-]*(\d{4}|\d{2})(?!\d)",
        re.IGNORECASE,
    ),
    re.compile(
        r"(JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC)[A-Z]*\s*(\d{1,2}),?\s*(\d{4})(?!\d)",
        re.IGNORECASE,
    ),
)

AMOUNT = re.compile(r"(?<![\d.])(?:RM|\$)?\s*(-?\d{1,3}(?:,\d{3})*\.\d{2}|-?\d+\.\d{2})(?![\d])")
TOTAL_LABEL = re.compile(
    r"(GRAND\s*TOTAL|ROUND(?:ED|ING)?\s*(?:D\s*)?TOTAL|TOTAL\s*ROUNDED|TOTAL\s*(?:AMOUNT|AMT|PAYABLE|DUE|SALES?)|"
    r"NET+\s*(?:TOTAL|AMOUNT)|AMOUNT\s*(?:DUE|PAYABLE)|TOTAL)",
    re.IGNORECASE,
)
SUMMARY = re.compile(r"(GST|TAX)\s*SUMMARY", re.IGNORECASE)
NOT_TOTAL = re.compile(
    r"SUB[\s-]*$|TOTAL\s*(QTY|QUANTITY|ITEMS?|GST|TAX|DISC|SAV|EXCL|NO\b|POINT|NUMBER)|EXCL",
    re.IGNORECASE,
)
ROUNDED_TOTAL = re.compile(r"ROUND(?:ED|ING)?\s*(?:D\s*)?TOTAL|TOTAL\s*ROUNDED", re.IGNORECASE)
ROUNDING = re.compile(r"ROUND(ING)?\s*(ADJ|ADJUSTMENT)?(?!.*TOTAL)", re.IGNORECASE)


@dataclass(frozen=True)
class Fields:
    company: str
    date: str
    total: str


def _clean_company(line: str) -> str:
    line = REG_NO.sub("", line).strip(" ,:-")
    return " ".join(line.split())


def extract_company(lines: list[str]) -> str:
    top = [ln.strip() for ln in lines[:COMPANY_LINES] if ln.strip()]
    for j, ln in enumerate(top):
        letters = sum(c.isalpha() for c in ln)
        m = COMPANY_SUFFIX.search(ln)
        if m is None or letters < 4 or HEADER.match(ln) or re.search(r"\b\d{5}\b", ln):
            continue
        if j > 0 and re.match(r"(CO\.?\s*)?(\(M\)\s*)?(SDN\.?\s*)?BHD", ln, re.IGNORECASE):
            # "SDN BHD" (or "CO. (M) SDN BHD") alone: the name is on the line before.
            return _clean_company(f"{top[j - 1].rstrip(',')} {ln}")
        if ln.endswith("&") and j + 1 < len(top):
            return _clean_company(f"{ln} {top[j + 1]}")
        return _clean_company(ln)
    for ln in top:
        letters = sum(c.isalpha() for c in ln)
        if letters >= 0.6 * len(ln) and letters >= 4 and not HEADER.match(ln):
            return _clean_company(ln)
    return _clean_company(top[0]) if top else ""


def _valid(day: int, month: int, year: int) -> bool:
    if year < 100:
        year += 2000
    try:
        Date(year, month, day)
    except ValueError:
        return False
    return 1990 <= year <= 2035


def find_dates(line: str) -> list[tuple[str, tuple[int, int, int]]]:
    """Date-shaped tokens of ``line`` with ``(year, month, day)``, as printed."""
    found: list[tuple[int, str, tuple[int, int, int]]] = []
    for kind, pattern in enumerate(DATE_PATTERNS):
        for m in pattern.finditer(line):
            g = m.groups()
            if kind == 0:
                d, mo, y = int(g[0]), int(g[2]), int(g[3])
                if mo > 12 >= d:  # month/day/year (US order)
                    d, mo = mo, d
            elif kind == 1:
                y, mo, d = int(g[0]), int(g[2]), int(g[3])
            elif kind == 2:
                d, mo, y = int(g[0]), MONTHS[g[1].upper()[:3]], int(g[2])
            else:
                mo, d, y = MONTHS[g[0].upper()[:3]], int(g[1]), int(g[2])
            if _valid(d, mo, y):
                found.append((m.start(), m.group(0).strip(), (y + 2000 if y < 100 else y, mo, d)))
    found.sort()
    return [(s, v) for _, s, v in found]


def extract_date(lines: list[str]) -> str:
    labelled: list[str] = []
    anywhere: list[str] = []
    for j, ln in enumerate(lines):
        dates = find_dates(ln)
        if not dates:
            continue
        near = " ".join(lines[max(0, j - 1) : j + 1]).upper()
        (labelled if "DATE" in near or "TARIKH" in near else anywhere).append(dates[0][0])
    if labelled:
        return labelled[0]
    return anywhere[0] if anywhere else ""


def _amounts(text: str) -> list[float]:
    return [float(a.replace(",", "")) for a in AMOUNT.findall(text)]


def _value_after(lines: list[str], j: int, rest: str) -> float | None:
    """The first amount on ``rest`` (the label line after the label), or on one of the next
    ``TOTAL_LOOKAHEAD`` lines before another label."""
    found = _amounts(rest)
    if found:
        return found[0]
    for nxt in lines[j + 1 : j + 1 + TOTAL_LOOKAHEAD]:
        found = _amounts(nxt)
        if found:
            return found[0]
        if re.search(r"[A-Za-z]{3,}", nxt) and not re.fullmatch(
            r"\s*(RM|MYR)\s*", nxt, re.IGNORECASE
        ):
            return None
    return None


def extract_total(lines: list[str]) -> str:
    labelled: list[float] = []
    rounded: list[float] = []
    adjustment = 0.0
    for j, ln in enumerate(lines):
        if SUMMARY.search(ln):
            break  # a tax summary table follows: its TOTAL is before tax
        m = TOTAL_LABEL.search(ln)
        if (
            m is not None
            and not NOT_TOTAL.search(ln[: m.end() + 12])
            and "SUB" not in ln[: m.start()].upper()[-5:]
        ):
            v = _value_after(lines, j, ln[m.end() :])
            if v is not None and v > 0:
                (rounded if ROUNDED_TOTAL.search(ln) else labelled).append(v)
            continue
        if ROUNDING.search(ln):
            v = _value_after(lines, j, ln[ROUNDING.search(ln).end() :])  # type: ignore[union-attr]
            if v is not None and abs(v) < 0.05:
                adjustment = v
    amounts = [a for ln in lines for a in _amounts(ln) if a > 0]
    if rounded and (not labelled or abs(rounded[-1] - max(labelled)) < 0.05):
        return f"{rounded[-1]:.2f}"
    if labelled:
        best = max(labelled)
        rounded_5sen = round(round(best * 20) / 20, 2)  # Malaysian cash rounding, to 0.05
        candidates = [round(best + adjustment, 2), round(best - abs(adjustment), 2)]
        if any(ROUNDING.search(ln) for ln in lines):
            candidates.append(rounded_5sen)
        for adjusted in candidates:
            if adjusted != best and any(abs(a - adjusted) < 0.005 for a in amounts):
                best = adjusted
                break
        return f"{best:.2f}"
    if not amounts:
        return ""
    repeated = [a for a in set(amounts) if amounts.count(a) >= 2]
    return f"{max(repeated or amounts):.2f}"


def extract_fields(text: str) -> Fields:
    """Company, date and total of one receipt's OCR text (lines in reading order)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return Fields(extract_company(lines), extract_date(lines), extract_total(lines))


def normalise_company(value: str) -> str:
    """Upper case, letters and digits only (spaces and punctuation dropped)."""
    return re.sub(r"[^A-Z0-9]", "", value.upper())


def normalise_date(value: str) -> str:
    """``YYYY-MM-DD`` when ``value`` holds a date, else its stripped upper-case text."""
    dates = find_dates(value)
    if dates:
        y, m, d = dates[0][1]
        return f"{y:04d}-{m:02d}-{d:02d}"
    return value.strip().upper()


def normalise_total(value: str) -> str:
    """The amount with two decimals (commas, ``RM`` and spaces dropped), else the text."""
    cleaned = re.sub(r"(?i)rm|myr|[$,\s]", "", value)
    try:
        return f"{float(cleaned):.2f}"
    except ValueError:
        return value.strip()


def score(pred: Fields, company: str, date: str, total: str) -> dict[str, bool]:
    """Exact match per field after normalisation."""
    return {
        "company": normalise_company(pred.company) == normalise_company(company),
        "date": normalise_date(pred.date) == normalise_date(date),
        "total": normalise_total(pred.total) == normalise_total(total),
    }
