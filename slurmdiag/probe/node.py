# ruff: noqa: UP031, UP041  (Python 3.8 on the nodes: socket.timeout is no TimeoutError there)
"""slurmdiag probe, node side: test the network from this node to every other node of the step.

Stdlib only, Python 3.8+, shipped and started like the collector (the same loader, one srun
step, source in the environment). sys.argv[1] is a JSON object of arguments (see main()).

Protocol with the controller (stdout lines are framed like the collector's, stdin is srun's
broadcast to every task):

1. On start: pick the interface (``ifname`` argument, else the job's NCCL_SOCKET_IFNAME /
   GLOO_SOCKET_IFNAME / NCCL_IB_HCA read from a process of the job on this node, else the
   interface of the job's established TCP connections, else the default route), open a TCP listener and a UDP echo socket on its address and print
   ``@SDG1-ADDR <node> <json>`` (address, ports, MTU, interface state).
2. Read the peer map from stdin: one JSON line ``{"order": [...], "peers": {node: {...}}}``.
3. Test every other node in ceil(log2 N) rounds (more when a round would run more than
   ``parallel`` tests at once): in round r this node tests the peers at the offsets of the r-th
   slice of 1..N-1 along the order, all at once; every node serves its
   peers' tests meanwhile. Each test: TCP connect, a bounded transfer up and back down (bytes
   and seconds capped), a UDP don't-fragment datagram of MTU-28 bytes echoed back (path MTU),
   and a 64-byte one (to tell an MTU problem from a blocked path).
4. Optionally a gloo all_reduce through torch (``torch_python``) in groups that halve the order
   level by level (the controller names the smallest failing group).
   Started at once (importing torch takes seconds), told the groups once the map is in.
5. The link tests' document is framed as soon as the rounds are over, the collective check's
   as ``NODE/collective`` after it; then keep serving peers until the controller writes ``end``
   on stdin or the deadline comes, and exit (every thread is a daemon, the torch child is
   killed). The deadline is the earlier of ``deadline_s`` after start and ``deadline_at`` (the
   controller's wall clock).
"""

import json
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time

FORMAT = "slurmdiag-probe/1"
COLLECTIVE_SUFFIX = "/collective"  # the collective check's document is framed as NODE/collective
CHUNK_CHARS = 600
IP_MTU_DISCOVER = 10
IP_PMTUDISC_DO = 2
IP_MTU = 14
SIOCGIFADDR = 0x8915
SIOCGIFMTU = 0x8921
SIOCGIFFLAGS = 0x8913
IFF_UP = 0x1
IFF_RUNNING = 0x40
ENV_KEYS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA")
SLURM_CLIENTS = ("srun", "salloc", "sbatch", "sattach", "scontrol", "squeue", "slurmstepd")
_out_lock = threading.Lock()


def write_line(line):
    data = line.encode("ascii", "replace")
    with _out_lock:
        while data:
            data = data[os.write(1, data):]


def frame_lines(node, doc):
    """The framed lines of ``doc``; slurmdiag/transport/framing.py decodes them."""
    import binascii
    import zlib

    data = json.dumps(doc, separators=(",", ":")).encode()
    payload = binascii.b2a_base64(zlib.compress(data, 6), newline=False).decode("ascii")
    crc = "%08x" % (zlib.crc32(payload.encode("ascii")) & 0xFFFFFFFF)
    chunks = [payload[i:i + CHUNK_CHARS] for i in range(0, len(payload), CHUNK_CHARS)] or [""]
    return ["@SDG1 %s %d %d %s %s\n" % (node, i, len(chunks), crc, c) for i, c in enumerate(chunks)]


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


# ---------------------------------------------------------------- interface choice


def ipv4_address(ifname):
    data = _ifreq(ifname, SIOCGIFADDR)
    return socket.inet_ntoa(data[20:24]) if data else None


def _ifreq(ifname, request):
    import fcntl

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        return fcntl.ioctl(s.fileno(), request, struct.pack("256s", ifname.encode()[:15]))
    except OSError:
        return None
    finally:
        s.close()


def interface_info(name):
    """Address, MTU and state through ioctls on a socket: they answer for this process's
    network namespace (/sys/class/net answers for the namespace that mounted /sys)."""
    mtu = _ifreq(name, SIOCGIFMTU)
    flags = _ifreq(name, SIOCGIFFLAGS)
    flag = struct.unpack("H", flags[16:18])[0] if flags else 0
    up, running = bool(flag & IFF_UP), bool(flag & IFF_RUNNING)
    return {
        "name": name,
        "address": ipv4_address(name),
        "mtu": struct.unpack("i", mtu[16:20])[0] if mtu else None,
        "operstate": None if not flags else ("up" if up and running else "down"),
        "up": up,
        "carrier": running,
    }


def interfaces():
    try:
        return sorted(name for _, name in socket.if_nameindex())
    except OSError:
        return []


def match_ifname(spec, names):
    """Names matching an NCCL_SOCKET_IFNAME-style spec: ``eth`` (prefix), ``=eth0`` (exact),
    ``^docker,lo`` (all but these prefixes); a comma-separated list of either kind."""
    spec = spec.strip()
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = spec.startswith("=")
    parts = [p for p in spec.lstrip("=").split(",") if p]

    def hit(name):
        return any(name == p if exact else name.startswith(p) for p in parts)

    return [n for n in names if (not hit(n) if exclude else hit(n)) and (exclude is False or n != "lo")]


def hca_interfaces(spec):
    """Network interfaces of the InfiniBand devices NCCL_IB_HCA names (IPoIB, RoCE)."""
    out = []
    for part in spec.lstrip("^=").split(","):
        hca = part.split(":")[0].strip()
        if not hca:
            continue
        try:
            out += sorted(os.listdir("/sys/class/infiniband/%s/device/net" % hca))
        except OSError:
            pass
    return out


def default_route_interface():
    text = _read("/proc/net/route") or ""
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) > 2 and parts[1] == "00000000":
            return parts[0]
    return None


def job_processes(job_id, node):
    """(pid, allowlisted network variables) of each process of ``job_id`` on this node (a
    process whose environment names another node is not ours: several slurmd share one host)."""
    if not job_id:
        return []
    want = ("SLURM_JOB_ID=%s" % job_id).encode()
    prefix = b"SLURMD_NODENAME="
    mine = prefix + node.encode()
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if want not in env or any(e.startswith(prefix) and e != mine for e in env):
            continue
        if (_read("/proc/%s/comm" % pid) or "") in SLURM_CLIENTS:
            continue  # srun on the batch node talks to Slurm, not to the other ranks
        found = {}
        for item in env:
            key, _, value = item.decode("utf-8", "replace").partition("=")
            if key in ENV_KEYS and value:
                found[key] = value
        out.append((int(pid), found))
    return out


def socket_addresses(pids):
    """Local IPv4 addresses of the established TCP connections of ``pids``, most used first
    (what the job's ranks really talk over, as attach sees it)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir("/proc/%d/fd" % pid):
                try:
                    link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
                except OSError:
                    continue
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            continue
    counts = {}
    for line in (_read("/proc/net/tcp") or "").splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10 or parts[3] != "01" or parts[9] not in inodes:
            continue
        address = socket.inet_ntoa(struct.pack("<I", int(parts[1].split(":")[0], 16)))
        if not address.startswith("127."):
            counts[address] = counts.get(address, 0) + 1
    return sorted(counts, key=lambda a: -counts[a])


def choose_interface(ifname, job_id, node):
    """(interface info, how it was chosen, notes): --ifname, else the job's variables, else the
    interface of the job's own established connections, else the default route."""
    names = interfaces()
    notes = []
    procs = job_processes(job_id, node) if not ifname else []
    env = next((found for _, found in procs if found), {})
    candidates = []
    how = None
    if ifname:
        candidates, how = match_ifname(ifname, names), "--ifname %s" % ifname
    else:
        for key in ENV_KEYS:
            if key in env:
                found = hca_interfaces(env[key]) if key == "NCCL_IB_HCA" else match_ifname(env[key], names)
                if found:
                    candidates, how = found, "the job's %s=%s" % (key, env[key])
                    break
                notes.append("the job's %s=%s matches no interface here" % (key, env[key]))
    if not candidates and procs:
        by_address = {ipv4_address(n): n for n in names}
        for address in socket_addresses([pid for pid, _ in procs]):
            if by_address.get(address):
                candidates = [by_address[address]]
                how = "the job's connections (from %s)" % address
                break
    if not candidates:
        route = default_route_interface()
        if route:
            candidates, how = [route], "the default route"
    if not candidates:
        candidates = [n for n in names if n != "lo"]
        how = "the first interface with an address"
    infos = [interface_info(n) for n in candidates]
    usable = [i for i in infos if i["address"]]
    chosen = usable[0] if usable else (infos[0] if infos else None)
    return chosen, how, notes


# ---------------------------------------------------------------- serving peers


def _recv_line(sock, limit=200):
    data = b""
    while not data.endswith(b"\n") and len(data) < limit:
        chunk = sock.recv(1)
        if not chunk:
            break
        data += chunk
    return data.decode("ascii", "replace").strip()


def serve_tcp(listener, state):
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_serve_one, args=(conn, state), daemon=True).start()


def _serve_one(conn, state):
    """One peer's test: take its upload for at most xfer_s, say how much came in how long,
    then send as much back for at most xfer_s (the peer measures that direction)."""
    xfer_s = state["xfer_s"]
    try:
        conn.settimeout(xfer_s + 2.0)
        head = _recv_line(conn).split()
        if len(head) != 3 or head[0] != "SDGP1" or not head[2].isdigit():
            return
        want, got, first, last = int(head[2]), 0, None, None
        conn.settimeout(0.2)
        end = time.monotonic() + xfer_s + 0.5
        while got < want and time.monotonic() < end:
            try:
                chunk = conn.recv(min(65536, want - got))
            except socket.timeout:
                continue
            if not chunk:
                break
            last = time.monotonic()
            if first is None:
                first = last
            got += len(chunk)
        seconds = (last - first) if first is not None and last is not None else 0.0
        conn.settimeout(xfer_s + 2.0)
        conn.sendall(b"OK %d %.6f\n" % (got, seconds))
        block, sent, end = b"\0" * 65536, 0, time.monotonic() + xfer_s
        while sent < want and time.monotonic() < end:
            sent += conn.send(block[:min(65536, want - sent)])
        with state["lock"]:
            state["served"].append(head[1])
    except OSError:
        pass
    finally:
        conn.close()


def serve_udp(sock):
    while True:
        try:
            data, peer = sock.recvfrom(65535)
            sock.sendto(data, peer)
        except OSError as exc:
            if exc.errno == 9:  # closed
                return


def df_socket(address):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
    s.bind((address, 0))
    return s


# ---------------------------------------------------------------- testing one peer


def udp_probe(address, peer, size, tries=3, wait_s=0.4):
    """True when a don't-fragment datagram of ``size`` bytes came back; else the reason."""
    s = df_socket(address)
    try:
        token = os.urandom(8)
        payload = token + b"\0" * max(0, size - 8)
        for _ in range(tries):
            try:
                s.sendto(payload, (peer["address"], peer["udp_port"]))
            except OSError as exc:
                return "send failed: %s" % (exc.strerror or exc)
            end = time.monotonic() + wait_s
            while time.monotonic() < end:
                ready, _, _ = select.select([s], [], [], max(0.0, end - time.monotonic()))
                if not ready:
                    break
                try:
                    data = s.recv(65535)
                except OSError as exc:
                    return "receive failed: %s" % (exc.strerror or exc)
                if data[:8] == token and len(data) == len(payload):
                    return True
        return "no echo of %d tries" % tries
    finally:
        s.close()


def test_peer(me, name, peer, args):
    result = {"peer": name, "connect": False, "connect_ms": None, "error": None}
    nbytes, xfer_s = int(args.get("bytes", 4 << 20)), float(args.get("xfer_s", 1.0))
    t0 = time.monotonic()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 131072)
        s.bind((me["address"], 0))
        s.settimeout(float(args.get("connect_s", 2.0)))
        s.connect((peer["address"], peer["tcp_port"]))
        result["connect"] = True
        result["connect_ms"] = round((time.monotonic() - t0) * 1000, 3)
        s.sendall(b"SDGP1 %s %d\n" % (me["node"].encode(), nbytes))
        # a small send buffer and a short timeout per send: the upload stops at its time cap
        # instead of queueing megabytes that a slow link would take long to drain
        s.settimeout(0.2)
        block, sent, t1 = b"\0" * 65536, 0, time.monotonic()
        end = t1 + xfer_s
        while sent < nbytes and time.monotonic() < end:
            try:
                sent += s.send(block[:min(65536, nbytes - sent)])
            except socket.timeout:
                continue
        s.settimeout(xfer_s + 2.0)
        ack = _recv_line(s).split()
        t2 = time.monotonic()
        if len(ack) != 3 or ack[0] != "OK":
            raise OSError("the peer did not acknowledge the transfer")
        result["up_bytes"], result["up_s"] = int(ack[1]), float(ack[2])
        got, end = 0, t2 + xfer_s
        while time.monotonic() < end:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                # the peer ended its bounded send with our late upload bytes still unread
                result["reset"] = True
                break
            if not chunk:
                break
            got += len(chunk)
        result["down_bytes"], result["down_s"] = got, round(time.monotonic() - t2, 6)
    except OSError as exc:
        result["error"] = "%s after %.1f s" % (exc.strerror or str(exc) or type(exc).__name__,
                                              time.monotonic() - t0)
    finally:
        s.close()
    if me.get("mtu"):
        ok = udp_probe(me["address"], peer, me["mtu"] - 28)
        result["mtu_probe"] = {"size": me["mtu"], "ok": ok is True,
                               "error": None if ok is True else ok}
        if ok is not True:
            small = udp_probe(me["address"], peer, 64)
            result["small_probe"] = {"ok": small is True, "error": None if small is True else small}
    result["elapsed_s"] = round(time.monotonic() - t0, 3)
    return result


def schedule(n, parallel=16):
    """Rounds of peer offsets: 1..n-1 split evenly into ceil(log2 n) slices (none for n < 2),
    or more when a slice would have more than ``parallel`` tests at once (the load on a
    running job's nodes stays bounded: at most 1024 nodes in 64 rounds of 16)."""
    offsets = list(range(1, n))
    rounds = max((n - 1).bit_length(), -(-(n - 1) // max(1, parallel))) if n > 1 else 0
    return [offsets[r * len(offsets) // rounds:(r + 1) * len(offsets) // rounds]
            for r in range(rounds)]


def run_rounds(me, order, peers, args, deadline):
    index, n = order.index(me["node"]), len(order)
    results = []
    for r, offsets in enumerate(schedule(n, int(args.get("parallel", 16)))):
        if time.monotonic() >= deadline:
            break  # rounds never started are left out: untested, not failed
        batch = [order[(index + d) % n] for d in offsets]
        out = {}

        def one(name, out=out):
            peer = peers.get(name)
            if peer is None:
                out[name] = {"peer": name, "connect": False, "error": "no address (did not start)"}
            else:
                out[name] = test_peer(me, name, peer, args)

        threads = [threading.Thread(target=one, args=(p,), daemon=True) for p in batch]
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        for name in batch:
            entry = out.get(name) or {"peer": name, "connect": False,
                                      "error": "no result before the deadline"}
            entry["round"] = r
            results.append(entry)
    return results


# ---------------------------------------------------------------- collective check

TORCH_SCRIPT = r"""
import json, os, sys, time, datetime
t0 = time.monotonic()
spec = json.loads(sys.argv[1])
try:
    import torch, torch.distributed as dist
except Exception as exc:
    print(json.dumps({"error": "torch not importable: %s" % exc}), flush=True); sys.exit(0)
print(json.dumps({"imported_s": round(time.monotonic() - t0, 2)}), flush=True)
line = sys.stdin.readline()
if not line.strip():
    sys.exit(0)
plan = json.loads(line)
me = plan["me"]
for level in plan["levels"]:
    members = level["members"]
    rank, size = members.index(me), len(members)
    master = plan["addresses"][members[0]]
    t = time.monotonic()
    out = {"level": level["level"], "members": members}
    try:
        store = dist.TCPStore(master["address"], master["store_port"], size, rank == 0,
                              timeout=datetime.timedelta(seconds=plan["timeout_s"]),
                              wait_for_workers=False, multi_tenant=True)
        store = dist.PrefixStore("level%d" % level["level"], store)
        pg = dist.ProcessGroupGloo(store, rank, size, datetime.timedelta(seconds=plan["timeout_s"]))
        x = torch.ones(1024)
        pg.allreduce([x]).wait()
        out["ok"] = float(x[0]) == float(size)
        if not out["ok"]:
            out["error"] = "wrong sum %s for %d members" % (float(x[0]), size)
    except Exception as exc:
        out["ok"] = False
        out["error"] = ("%s: %s" % (type(exc).__name__, exc))[:300]
    out["seconds"] = round(time.monotonic() - t, 3)
    print(json.dumps(out), flush=True)
    if out["ok"] and level["level"] == 0:
        break
"""


def levels_for(order, me):
    """The groups ``me`` is in: the whole order, then halves, quarters ... down to pairs."""
    out, lo, hi, level = [], 0, len(order), 0
    index = order.index(me)
    while hi - lo >= 2:
        out.append({"level": level, "members": order[lo:hi]})
        mid = (lo + hi + 1) // 2
        lo, hi = (lo, mid) if index < mid else (mid, hi)
        level += 1
    return out


def start_torch(args, ifname):
    python = args.get("torch_python")
    if not python or not args.get("collective", False):
        return None
    env = {k: v for k, v in os.environ.items() if k.startswith(("PATH", "HOME", "LANG", "LD_"))}
    if ifname:
        env["GLOO_SOCKET_IFNAME"] = ifname
    try:
        return subprocess.Popen([python, "-I", "-c", TORCH_SCRIPT, "{}"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    except OSError as exc:
        return exc


def collective(proc, order, peers, me, deadline, timeout_s):
    if proc is None:
        return None
    if isinstance(proc, OSError):
        return {"error": "cannot start %s" % proc}
    out = {"levels": [], "error": None}
    try:
        plan = {"me": me, "levels": levels_for(order, me), "timeout_s": timeout_s,
                "addresses": peers}
        lines = []

        def reader():
            for raw in proc.stdout:
                lines.append(json.loads(raw.decode() or "{}"))

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        while not lines and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if lines and lines[0].get("error"):
            return {"error": lines[0]["error"], "levels": []}
        if not lines:
            return {"error": "torch did not start in time", "levels": []}
        out["import_s"] = lines[0].get("imported_s")
        proc.stdin.write((json.dumps(plan) + "\n").encode())
        proc.stdin.flush()
        want = len(plan["levels"])
        while time.monotonic() < deadline and proc.poll() is None and len(lines) - 1 < want:
            time.sleep(0.05)
        t.join(0.2)
        out["levels"] = [x for x in lines[1:] if "level" in x]
        if len(out["levels"]) < want and not (out["levels"] and out["levels"][0].get("ok")):
            out["error"] = "stalled: no answer before the deadline"
    except (OSError, ValueError) as exc:
        out["error"] = str(exc)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return out


# ---------------------------------------------------------------- main


def read_stdin_line(deadline):
    data = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([0], [], [], max(0.0, min(0.5, deadline - time.monotonic())))
        if not ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return data.decode() or None
        data += chunk
        if b"\n" in data:
            return data.decode()
    return None


def main(argv):
    t0 = time.monotonic()
    try:
        args = json.loads(argv[1]) if len(argv) > 1 else {}
    except ValueError:
        args = {}
    budget = float(args.get("deadline_s", 50.0))
    if args.get("deadline_at"):  # the controller's clock: a step that started late ends in time
        budget = min(budget, max(1.0, float(args["deadline_at"]) - time.time()))
    deadline = t0 + budget
    node = str(args.get("node") or os.environ.get("SLURMD_NODENAME") or os.uname().nodename)
    write_line("@SDG1-HELLO %s %d\n" % (node, os.getpid()))
    chosen, how, notes = choose_interface(args.get("ifname") or "", str(args.get("job_id") or ""),
                                        node)
    doc = {"format": FORMAT, "node": node, "hostname": os.uname().nodename, "errors": [],
           "interface": chosen, "chosen_by": how, "notes": notes, "results": [],
           "python": "%d.%d.%d" % sys.version_info[:3]}
    me = dict(chosen or {}, node=node)
    state = {"served": [], "lock": threading.Lock(), "xfer_s": float(args.get("xfer_s", 1.0))}
    torch_proc = start_torch(args, (chosen or {}).get("name"))
    listening = False
    if chosen and chosen.get("address"):
        try:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.bind((chosen["address"], 0))
            listener.listen(128)
            udp = df_socket(chosen["address"])
            store = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            store.bind((chosen["address"], 0))
            me.update(tcp_port=listener.getsockname()[1], udp_port=udp.getsockname()[1],
                      store_port=store.getsockname()[1])
            store.close()  # reserved for the collective check's TCPStore, bound again there
            threading.Thread(target=serve_tcp, args=(listener, state), daemon=True).start()
            threading.Thread(target=serve_udp, args=(udp,), daemon=True).start()
            listening = True
        except OSError as exc:
            doc["errors"].append("cannot listen on %s: %s" % (chosen["address"], exc))
    else:
        doc["errors"].append("no usable interface (%s)" % how)
    addr = {k: me.get(k) for k in ("address", "tcp_port", "udp_port", "store_port", "mtu", "name")}
    addr["listening"] = listening
    write_line("@SDG1-ADDR %s %s\n" % (node, json.dumps(addr, separators=(",", ":"))))
    line = read_stdin_line(deadline)
    plan = None
    try:
        plan = json.loads(line) if line else None
    except ValueError:
        plan = None
    if not plan:
        doc["errors"].append("no peer map from the controller before the deadline")
    elif listening:
        order, peers = plan["order"], plan["peers"]
        doc["order"] = order
        doc["results"] = run_rounds(me, order, peers, args, deadline - 1.0)
        doc["rounds"] = len(schedule(len(order), int(args.get("parallel", 16))))
        doc["tests_s"] = round(time.monotonic() - t0, 3)
    doc["duration_s"] = round(time.monotonic() - t0, 3)
    # the link tests go out now: a stalled collective check below cannot take them along
    for frame in frame_lines(node, doc):
        write_line(frame)
    if plan and listening and torch_proc is not None:
        result = collective(torch_proc, plan["order"], plan["peers"], node, deadline - 1.0,
                            float(args.get("collective_timeout_s", 8.0)))
        torch_proc = None
        for frame in frame_lines(node + COLLECTIVE_SUFFIX, {"format": FORMAT, "node": node,
                                                             "collective": result}):
            write_line(frame)
    if torch_proc is not None and not isinstance(torch_proc, OSError):
        torch_proc.kill()
        torch_proc.wait()
    # keep answering the peers' tests until the controller says every node is done
    while plan and time.monotonic() < deadline:
        rest = read_stdin_line(deadline)
        if rest is None or "end" in rest:
            break
    return 0


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main(sys.argv))
