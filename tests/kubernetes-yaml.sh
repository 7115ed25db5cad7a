#!/bin/sh
# docs/KUBERNETES.md's manifest parses as YAML (python3's yaml) and keeps what
# the page says: a LeaderWorkerSet of two pods whose Secret volumes are mounted
# 0400, with no fsGroup, RK_PORT and RK_SECRET_FILE set in every container and
# RK_PORT's port exposed on the leader. Skips (77) without python3 or its yaml.
s=${srcdir:-.}
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
python3 -c 'import yaml' 2>/dev/null || { echo "SKIP: no python3 yaml (python3-yaml)"; exit 77; }
exec python3 - "$s/docs/KUBERNETES.md" <<'PY'
import re, sys, yaml
text = open(sys.argv[1]).read()
blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
assert len(blocks) == 1, "one yaml block expected, found %d" % len(blocks)
docs = [d for d in yaml.safe_load_all(blocks[0]) if d]
kinds = {d["kind"]: d for d in docs}
assert set(kinds) == {"Secret", "LeaderWorkerSet", "Service"}, kinds.keys()
lws = kinds["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
assert lws["size"] == 2, lws["size"]
for role in ("leaderTemplate", "workerTemplate"):
    spec = lws[role]["spec"]
    assert "fsGroup" not in spec.get("securityContext", {}), role + ": fsGroup"
    vols = [v for v in spec["volumes"] if "secret" in v]
    assert vols and all(v["secret"]["defaultMode"] == 0o400 for v in vols), role + ": mode"
    for c in spec["containers"]:
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env.get("RK_PORT") and env.get("RK_SECRET_FILE"), role + ": env"
        assert not any(k.startswith("MASTER_") for k in env), role + ": MASTER_*"
        mounts = [m["mountPath"] for m in c["volumeMounts"]]
        assert any(env["RK_SECRET_FILE"].startswith(m + "/") for m in mounts), role + ": mount"
    if role == "leaderTemplate":
        ports = [p["containerPort"] for c in spec["containers"] for p in c.get("ports", [])]
        assert int(env["RK_PORT"]) in ports, "RK_PORT not exposed on the leader"
print("ok: %d documents" % len(docs))
PY
