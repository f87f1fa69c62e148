"""Parsers for nvidia-smi (CSV queries, ``-q -x`` XML) and kernel Xid lines: what the collector runs.

Every parser fills ``Gpu.raw`` with the fields it read, verbatim, under the ``--query-gpu``
field names (``utilization.gpu``, ``memory.used``, ...) whatever the input format, so that a
``[N/A]`` or ``Unknown Error`` stays visible where the typed field is None.

Clock event (throttle) reasons are reported in one vocabulary for all formats: a comma-joined
list of NVML reason names (``gpu_idle``, ``sw_power_cap``, ``hw_slowdown``, ...), ``""`` when
none is active, None when nvidia-smi did not say. The CSV bitmask (``0x...84``) is decoded
into it; in ``raw`` the CSV keeps the bitmask while XML keeps the name list.
GPU ``index`` is the CSV ``index`` column when queried, else the order of appearance (which
is nvidia-smi's own enumeration order in every format).
"""

from __future__ import annotations

import csv
import html
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from slurmdiag.errors import ParseError
from slurmdiag.safeio import decimal_int
from slurmdiag.snapshot import Gpu, GpuApp

__all__ = [
    "XidEvent",
    "parse_nvidia_smi_apps_csv",
    "parse_nvidia_smi_query_csv",
    "parse_nvidia_smi_xml",
    "parse_xid_events",
    "parse_xid_lines",
]

# NVML clocks event reason bits (nvml.h, nvmlClocksEventReason*), in bit order.
_REASON_BITS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clocks_setting"),
)

_NUMBER_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")


def _number(value: str | None) -> float | None:
    """Leading number of a value with units (``300.00 W``, ``38 %``, ``16x``); else None."""
    if value is None:
        return None
    match = _NUMBER_RE.match(value)
    return float(match.group(1)) if match else None


def _word(value: str | None) -> str | None:
    """A textual value, None for nvidia-smi's "no value" markers (``N/A``, ``[Not Supported]``)."""
    if value is None:
        return None
    value = value.strip()
    if not value or value.startswith("[") or value in ("N/A", "Unknown Error", "Not Supported"):
        return None
    return value


def _decode_reason_mask(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        mask = int(value.strip(), 16)
    except ValueError:
        return None
    return ",".join(name for bit, name in _REASON_BITS if mask & bit)


def _reasons_from_fields(raw: dict[str, str]) -> str | None:
    """Active clock event reasons from a bitmask field or from per-reason Active/Not Active."""
    for field in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        if field in raw:
            return _decode_reason_mask(raw[field])
    per_reason = [
        (field.split(".", 1)[1], value)
        for field, value in raw.items()
        if field.startswith(("clocks_event_reasons.", "clocks_throttle_reasons."))
    ]
    if not per_reason:
        return None
    return ",".join(name for name, value in per_reason if value.strip() == "Active")


def _gpu_from_fields(index: int | None, raw: dict[str, str], reasons: str | None = None) -> Gpu:
    """Build a Gpu from ``--query-gpu`` style field names; every field also stays in ``raw``."""
    power = raw.get("power.draw", raw.get("power.draw.instant", raw.get("power.draw.average")))
    parsed_index = _number(raw.get("index"))
    return Gpu(
        index=int(parsed_index) if parsed_index is not None else index,
        uuid=_word(raw.get("uuid", raw.get("gpu_uuid"))),
        name=_word(raw.get("name")),
        utilization_gpu=_number(raw.get("utilization.gpu")),
        utilization_memory=_number(raw.get("utilization.memory")),
        memory_used_mib=_number(raw.get("memory.used")),
        memory_total_mib=_number(raw.get("memory.total")),
        temperature_c=_number(raw.get("temperature.gpu")),
        power_w=_number(power),
        clocks_event_reasons=reasons if reasons is not None else _reasons_from_fields(raw),
        ecc_uncorrected_volatile=_number(raw.get("ecc.errors.uncorrected.volatile.total")),
        pcie_gen=_number(raw.get("pcie.link.gen.current", raw.get("pcie.link.gen.gpucurrent"))),
        pcie_width=_number(raw.get("pcie.link.width.current")),
        retired_pending=_word(raw.get("retired_pages.pending")),
        remapped_pending=_word(raw.get("remapped_rows.pending")),
        raw=raw,
    )


# ---------------------------------------------------------------------------------------------
# CSV

# Aliases accepted by --query-gpu / --query-compute-apps, mapped to the names used in `raw`.
_FIELD_ALIASES = {"gpu_name": "name", "used_memory": "used_gpu_memory"}
_FIELD_NAME_RE = re.compile(r"^[a-z_][a-z0-9_.]*$")
_UNIT_RE = re.compile(r"\s*\[[^\]]*\]\s*$")


def _header_fields(row: list[str]) -> list[str] | None:
    """Field names of a CSV header row (units like ``[MiB]`` dropped), None if not a header."""
    fields = []
    for cell in row:
        name = _UNIT_RE.sub("", cell.strip()).lower()
        if not _FIELD_NAME_RE.match(name):
            return None
        fields.append(_FIELD_ALIASES.get(name, name))
    return fields or None


def _csv_rows(text: str, what: str) -> tuple[list[str], list[list[str]]] | None:
    """Header fields and data rows of an nvidia-smi CSV; None when it reported no devices."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or lines[0].strip() == "No devices were found":
        return None
    reader = csv.reader(lines, skipinitialspace=True)
    header_row = next(reader)
    fields = _header_fields(header_row)
    if fields is None:
        raise ParseError(
            f"not nvidia-smi {what} CSV with a header: {lines[0].strip()[:120]!r}",
            hint="query with --format=csv (header kept)",
        )
    rows = []
    for row in reader:
        cells = [cell.strip() for cell in row]
        if len(cells) == 1 and set(cells[0]) <= {"-"}:
            continue  # a '---' separator pasted between two commands
        rows.append(cells)
    return fields, rows


def parse_nvidia_smi_query_csv(text: str) -> tuple[Gpu, ...]:
    """Parse ``nvidia-smi --query-gpu=... --format=csv`` output (header required).

    Columns are mapped by their header names; a short last row (cut output) gives a Gpu with
    the columns it has. ``index`` defaults to the row number when it was not queried.
    """
    parsed = _csv_rows(text, "--query-gpu")
    if parsed is None:
        return ()
    fields, rows = parsed
    return tuple(
        _gpu_from_fields(row_no, dict(zip(fields, row))) for row_no, row in enumerate(rows)
    )


def parse_nvidia_smi_apps_csv(text: str) -> tuple[GpuApp, ...]:
    """Parse ``nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory``."""
    parsed = _csv_rows(text, "--query-compute-apps")
    if parsed is None:
        return ()
    fields, rows = parsed
    apps = []
    for row in rows:
        raw = dict(zip(fields, row))
        pid = _number(raw.get("pid"))
        apps.append(
            GpuApp(
                gpu_uuid=_word(raw.get("gpu_uuid")),
                pid=int(pid) if pid is not None else None,
                process_name=_word(raw.get("process_name", raw.get("name"))),
                used_memory_mib=_number(raw.get("used_gpu_memory")),
            )
        )
    return tuple(apps)


# ---------------------------------------------------------------------------------------------
# XML (-q -x)

_XML_TAG_RE = re.compile(r"<(/?)([A-Za-z_][\w.-]*)((?:\s[^<>]*?)?)(/?)>")
_XML_ATTR_RE = re.compile(r"([A-Za-z_][\w.-]*)\s*=\s*\"([^\"]*)\"")


def _lenient_xml_tree(text: str) -> ET.Element:
    """Build a tree from XML that a strict parser refuses (cut short, a tag missing).

    A closing tag closes the nearest open element of that name (ignored when none is open);
    elements still open at the end are closed there.
    """
    root = ET.Element("lenient_root")
    stack = [root]
    last_end = 0
    for match in _XML_TAG_RE.finditer(text):
        between = text[last_end : match.start()]
        last_end = match.end()
        if between.strip() and not between.lstrip().startswith("<"):
            current = stack[-1]
            current.text = (current.text or "") + html.unescape(between)
        closing, name, attributes, self_closing = match.groups()
        if closing:
            names = [element.tag for element in stack]
            if name in names[1:]:
                del stack[len(names) - 1 - names[::-1].index(name) :]
            continue
        element = ET.SubElement(stack[-1], name, dict(_XML_ATTR_RE.findall(attributes)))
        if not self_closing:
            stack.append(element)
    children = list(root)
    return children[0] if len(children) == 1 else root


def _xml_find(element: ET.Element, path: str) -> ET.Element | None:
    """The element at ``path`` below ``element``; anywhere below it when a broken document
    nested it deeper (a lost closing tag moves everything after it one level down)."""
    found = element.find(path)
    return found if found is not None else element.find(".//" + path)


def _xml_text(element: ET.Element | None, path: str) -> str | None:
    if element is None:
        return None
    found = _xml_find(element, path)
    if found is None or found.text is None:
        return None
    return found.text.strip()


def _without_subtrees(element: ET.Element, tag: str) -> ET.Element:
    """A copy of ``element`` without its ``tag`` subtrees."""
    copy = ET.Element(element.tag, element.attrib)
    copy.text = element.text
    copy.extend(_without_subtrees(child, tag) for child in element if child.tag != tag)
    return copy


def _gpu_from_xml(index: int, element: ET.Element) -> Gpu:
    # MIG devices repeat <fb_memory_usage> and friends: keep them out of the lookups.
    gpu = _without_subtrees(element, "mig_devices")
    raw: dict[str, str] = {}

    def put(field: str, value: str | None) -> None:
        if value is not None:
            raw[field] = value

    put("pci.bus_id", gpu.get("id"))
    put("name", _xml_text(gpu, "product_name"))
    put("uuid", _xml_text(gpu, "uuid"))
    put("utilization.gpu", _xml_text(gpu, "utilization/gpu_util"))
    put("utilization.memory", _xml_text(gpu, "utilization/memory_util"))
    put("memory.used", _xml_text(gpu, "fb_memory_usage/used"))
    put("memory.total", _xml_text(gpu, "fb_memory_usage/total"))
    put("temperature.gpu", _xml_text(gpu, "temperature/gpu_temp"))
    for readings in ("gpu_power_readings", "power_readings"):
        for tag in ("power_draw", "instant_power_draw", "average_power_draw"):
            if "power.draw" not in raw:
                put("power.draw", _xml_text(gpu, f"{readings}/{tag}"))
    put("pcie.link.gen.current", _xml_text(gpu, "pci/pci_gpu_link_info/pcie_gen/current_link_gen"))
    put(
        "pcie.link.width.current",
        _xml_text(gpu, "pci/pci_gpu_link_info/link_widths/current_link_width"),
    )
    # <clocks_throttle_reasons> up to driver 530, renamed <clocks_event_reasons> in 535.
    reasons_element = _xml_find(gpu, "clocks_event_reasons")
    if reasons_element is None:
        reasons_element = _xml_find(gpu, "clocks_throttle_reasons")
    reasons = None
    if reasons_element is not None:
        reasons = ",".join(
            re.sub(r"^clocks_(?:event|throttle)_reason_", "", child.tag)
            for child in reasons_element
            if (child.text or "").strip() == "Active"
        )
        raw["clocks_event_reasons.active"] = reasons
    put("ecc.errors.uncorrected.volatile.total", _xml_volatile_uncorrected(gpu))
    pending = _xml_text(gpu, "retired_pages/pending_retirement")
    if pending is None:
        pending = _xml_text(gpu, "retired_pages/pending_blacklist")
    put("retired_pages.pending", pending)
    remapped = _xml_find(gpu, "remapped_rows")
    if remapped is not None:
        put(
            "remapped_rows.pending",
            _xml_text(remapped, "remapped_row_pending") or ((remapped.text or "").strip() or None),
        )
    put("mig.mode.current", _xml_text(gpu, "mig_mode/current_mig"))
    mig_devices = list(element.iter("mig_device"))
    if mig_devices:
        raw["mig.devices"] = str(len(mig_devices))
    return _gpu_from_fields(index, raw, reasons)


def _xml_volatile_uncorrected(gpu: ET.Element) -> str | None:
    """Volatile uncorrectable ECC count, as text: double_bit total (old) or the sum (new)."""
    volatile = _xml_find(gpu, "ecc_errors/volatile")
    if volatile is None:
        return None
    old_total = volatile.find("double_bit/total")
    if old_total is not None:
        return (old_total.text or "").strip() or None
    # sram_uncorrectable + dram_uncorrectable (v11/v12), sram_uncorrectable_parity/_secded (v13)
    values = [(child.text or "").strip() for child in volatile if "uncorrectable" in child.tag]
    numbers = [_number(v) for v in values]
    known = [n for n in numbers if n is not None]
    if known:
        return str(int(sum(known)))
    return values[0] if values else None


def parse_nvidia_smi_xml(text: str) -> tuple[Gpu, ...]:
    """Parse ``nvidia-smi -q -x``; a cut or broken document yields what could be read of it."""
    if "<nvidia_smi_log" not in text and "<gpu" not in text:
        if not text.strip():
            return ()
        raise ParseError("not nvidia-smi XML: no <nvidia_smi_log> or <gpu> element")
    # A node document is JSON, which can carry lone surrogates: the XML parser cannot encode them.
    text = text.encode("utf-8", errors="replace").decode("utf-8")
    try:
        root = ET.fromstring(text)
    except ET.ParseError:
        root = _lenient_xml_tree(text)
    gpus = [root] if root.tag == "gpu" else root.iter("gpu")
    return tuple(_gpu_from_xml(i, gpu) for i, gpu in enumerate(gpus))


# ---------------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------------
# Xid (kernel log)


@dataclass(frozen=True)
class XidEvent:
    """One ``NVRM: Xid`` kernel message."""

    xid: int
    pci: str
    pid: int | None
    process_name: str | None
    message: str
    line: str


XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[^)]*)\): (?P<xid>[0-9]{1,9})(?![0-9])"
    r"(?:, pid=(?P<pid>[^,]*))?(?:, name=(?P<name>[^,]*))?,?\s*(?P<message>.*)$"
)


def parse_xid_events(text: str) -> tuple[XidEvent, ...]:
    """Structured ``NVRM: Xid (PCI:...): N, pid=..., name=..., message`` lines of dmesg."""
    events = []
    for line in text.splitlines():
        if "Xid" not in line:
            continue
        match = XID_RE.search(line)
        if match is None:
            continue
        pid_text = (match.group("pid") or "").strip("'\" ")
        name = (match.group("name") or "").strip()
        events.append(
            XidEvent(
                xid=int(match.group("xid")),
                pci=match.group("pci"),
                pid=decimal_int(pid_text),
                process_name=name if name and name != "<unknown>" else None,
                message=match.group("message").strip(),
                line=line.strip(),
            )
        )
    return tuple(events)


def parse_xid_lines(text: str) -> tuple[str, ...]:
    """The Xid lines of a kernel log, stripped (the form ``GpuState.xid_events`` keeps)."""
    return tuple(event.line for event in parse_xid_events(text))
