"""nvidia-smi's raw outputs (query-gpu, compute apps, -q -x) and the kernel's Xid lines."""

from .tools import _one_line, tool_run

GPU_FIELDS = (
    "index,uuid,name,utilization.gpu,utilization.memory,memory.used,memory.total,"
    "temperature.gpu,power.draw,clocks_event_reasons.active,ecc.errors.uncorrected.volatile.total,"
    "pcie.link.gen.current,pcie.link.width.current,retired_pages.pending,remapped_rows.pending"
)
GPU_FIELD_SETS = (
    GPU_FIELDS,
    # Drivers before 535 know the field as clocks_throttle_reasons.
    GPU_FIELDS.replace("clocks_event_reasons", "clocks_throttle_reasons"),
    (
        "index,uuid,name,utilization.gpu,utilization.memory,memory.used,memory.total,"
        "temperature.gpu,power.draw"
    ),
)


def _tool_result(argv, rc, out, err, note):
    text = out if not err else (out + ("\n" if out and not out.endswith("\n") else "") + err)
    return {"argv": argv, "returncode": rc, "text": text, "error": note}


def collect_gpus(nvidia_smi, clock):
    """Task: nvidia-smi's raw outputs and the kernel's Xid lines."""
    if not nvidia_smi:
        return {
            "status": "absent",
            "message": "no GPUs visible (nvidia-smi not found)",
            "query_gpu": None,
            "compute_apps": None,
            "qx": None,
            "xid_lines": [],
            "xid_error": None,
        }
    gpu = {  # type: dict
        "status": "error",
        "message": None,
        "query_gpu": None,
        "compute_apps": None,
        "qx": None,
        "xid_lines": [],
        "xid_error": None,
    }
    for fields in GPU_FIELD_SETS:
        argv = [nvidia_smi, "--query-gpu=" + fields, "--format=csv"]
        result = _tool_result(argv, *(yield from tool_run(argv, min(10.0, clock.left()))))
        gpu["query_gpu"] = result
        if result["returncode"] == 0 or result["error"]:
            break  # success, or a hang/timeout that a retry would only repeat
    if gpu["query_gpu"]["returncode"] == 0:
        gpu["status"] = "ok"
        argv = [
            nvidia_smi,
            "--query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory",
            "--format=csv",
        ]
        timeout = min(10.0, clock.left())
        gpu["compute_apps"] = _tool_result(argv, *(yield from tool_run(argv, timeout)))
    else:
        failed = gpu["query_gpu"]
        if not failed["error"] and clock.left() > 1.0:
            argv = [nvidia_smi, "-q", "-x"]
            timeout = min(10.0, clock.left())
            gpu["qx"] = _tool_result(argv, *(yield from tool_run(argv, timeout)))
        text = failed["text"]
        if "No devices were found" in text:
            gpu["status"] = "absent"
        gpu["message"] = "nvidia-smi failed: " + (
            failed["error"] or _one_line(text) or "exit code {}".format(failed["returncode"])
        )
    if clock.left() > 0.5:
        rc, out, err, note = yield from tool_run(["dmesg", "-T"], min(2.0, clock.left()))
        if rc == 0:
            gpu["xid_lines"] = [line for line in out.splitlines() if "NVRM: Xid" in line][-50:]
        else:
            gpu["xid_error"] = "dmesg: " + (note or _one_line(err) or f"exit code {rc}")
    else:
        gpu["xid_error"] = "dmesg skipped: deadline"
    return gpu
