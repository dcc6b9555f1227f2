"""Apache RocketMQ 4.9.x from a binary distribution laid out as Apache ships it (ROCKETMQ_HOME).

Tests: tests/unit/test_implementations.py; tests/integration/test_apache_broker.py runs a distribution.

Each broker runs as `sh $ROCKETMQ_HOME/bin/mqbroker -c RUN/nodes/NODE/broker.properties`: the node's conf
file from compose/ with the deployment keys on top, written into its run folder (never into the
repository, so an `updateBrokerConfig` rewrites the run's copy). The distribution's own scripts start the
JVM; JAVA_OPT_EXT (appended last, so it wins) makes the heap small and points user.home, where 4.9 logs
(logs/rocketmqlogs) and keeps what it keeps there, at the node's folder.

A broker also gets a home of its own, RUN/nodes/NODE/rocketmq-home, as -Drocketmq.home.dir (node_home).
4.9.8 reads two things from its home (rocketmq.home.dir, else $ROCKETMQ_HOME): conf/logback_broker.xml
(BrokerStartup) and, with aclEnable, its ACL files (PlainPermissionManager: conf/plain_acl.yml, or the
property rocketmq.acl.plain.file, always joined to the home, plus every *.yml under conf/acl/); it creates
conf/plain_acl.yml when it is missing and rewrites it on updateAclConfig. Its aclConfigFile key is ours
alone. So the node's conf/ is a copy of the distribution's without plain_acl.yml and acl/, and under
aclEnable its conf/plain_acl.yml links to the node's aclConfigFile: the kit's file in the store (acl.py),
one per node, the one 4.9 reads and rewrites. Nothing is ever written into ROCKETMQ_HOME; the scripts still
take bin/ and lib/ (and the classpath's conf/) from there.

The scripts run java as a child of sh (no exec), so the process record follows the java process: a
SIGKILL to it is a crash of the broker, and its exit frees the ports before a restart binds them.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from rmqha.broker.config.properties import parse_properties

from .. import ClusterError
from .. import runfolder as rf
from . import BrokerChoice, Launch
from .apache_image import NODE_HOME

# 4.9 ignores keys it does not know; these are ours alone, left out so the file says what 4.9 runs.
OURS_ONLY_KEYS = (
    "metricsPort",
    "metricsBindAddress",
    "haAllowedAddresses",
    "haRecoveryPeers",
    "haRecoveryEnable",
    "slaveSyncMasterAddress",
)
# runserver.sh and runbroker.sh ask for 4 and 8 GiB; a test cluster of five JVMs on one machine fits in 256 MiB each.
JAVA_OPT_EXT = "-Xms256m -Xmx256m -Xmn128m -XX:MaxDirectMemorySize=512m"
# 4.9 unmaps commit-log files through java.nio internals; from Java 9 on that needs these opened, or a
# recovery that truncates a file fails with InaccessibleObjectException ("load exception") and the broker exits.
JAVA9_OPENS = " ".join(f"--add-opens java.base/{p}=ALL-UNNAMED" for p in ("java.nio", "sun.nio.ch", "jdk.internal.ref"))
REQUIRED = ("bin/mqbroker", "bin/mqnamesrv", "bin/runbroker.sh", "bin/runserver.sh", "conf")
VERSION_HINT = "Apache RocketMQ 4.9.x binary distribution (bin/, lib/, conf/ as in rocketmq-all-4.9.x-bin-release.zip)"


def check_available(choice: BrokerChoice) -> None:
    check_distribution(choice)
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        raise ClusterError("BROKER=apache needs a Java runtime: no java on PATH and JAVA_HOME is unset")


def check_distribution(choice: BrokerChoice) -> None:
    """ROCKETMQ_HOME is set and laid out as Apache ships it (the docker backend needs no Java here)."""
    home = choice.home
    if not home:
        raise ClusterError(
            "BROKER=apache needs ROCKETMQ_HOME=<dir>: the folder of an " + VERSION_HINT + " (not shipped here)"
        )
    missing = [p for p in REQUIRED if not (Path(home) / p).exists()]
    if not any((Path(home) / "lib").glob("rocketmq-broker-*.jar")):
        missing.append("lib/rocketmq-broker-*.jar")
    if missing:
        raise ClusterError(f"ROCKETMQ_HOME={home} is not an {VERSION_HINT}: missing {', '.join(missing)}")


def broker_properties(conf: str | Path, overrides: dict) -> dict[str, str]:
    """What one 4.9 broker is given: its conf file, then the deployment keys (4.9's names)."""
    try:
        props = parse_properties(Path(conf).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ClusterError(f"cannot read {conf}: {e}") from e
    props.update({k: str(v) for k, v in overrides.items()})
    for k in OURS_ONLY_KEYS:
        props.pop(k, None)
    if props.get("brokerIP1") and not props.get("brokerIP2"):
        # 4.9 registers brokerIP2:haListenPort as the HA address and defaults brokerIP2 to an address of its
        # own choosing; ours (and the port plan) use brokerIP1
        props["brokerIP2"] = props["brokerIP1"]
    root = props.get("storePathRootDir")
    if root and "storePathCommitLog" not in props:
        # 4.9 puts the commit log under ${user.home}/store/commitlog unless told: beside the rest of the store
        props["storePathCommitLog"] = str(Path(root) / "commitlog")
    return props


def write_properties(path: Path, props: dict[str, str], header: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# {header}"] + [f"{k}={_escape(v)}" for k, v in sorted(props.items())]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n")


# conf/ entries of the distribution a node's home never gets: 4.9 reads ACL accounts from them
NOT_COPIED = ("plain_acl.yml", "acl")
ACL_FILE = "plain_acl.yml"  # in the home's conf/: the file 4.9.8 reads by default


def acl_file_of(props: dict) -> str | None:
    """The ACL file a broker's properties name (aclConfigFile under aclEnable, as the kit's acl.py sets
    them), or None: 4.9 has no such key, node_home makes it so."""
    if str(props.get("aclEnable", "")).strip().lower() != "true":
        return None
    return props.get("aclConfigFile") or None


def _copy_over(src: str, dst: str) -> None:
    if os.path.lexists(dst):  # a read-only copy of an earlier launch
        os.unlink(dst)
    shutil.copy2(src, dst)


def node_home(node_dir: Path, dist_home: str | Path, acl_link: str | None) -> Path:
    """NODE_DIR/rocketmq-home, the broker's rocketmq.home.dir (made again at every launch): conf/ copied
    from the distribution's but for its ACL files (NOT_COPIED), and conf/plain_acl.yml a symlink to
    acl_link (relative to conf/, or absolute as the broker sees it) when given. Without acl_link a link
    left by an earlier launch is removed; a file 4.9 created itself (aclEnable set by hand) is kept."""
    home = Path(node_dir) / NODE_HOME
    conf = home / "conf"
    src = Path(dist_home) / "conf"
    try:
        conf.mkdir(parents=True, exist_ok=True)
        shutil.copytree(
            src,
            conf,
            ignore=lambda d, names: [n for n in names if Path(d) == src and n in NOT_COPIED],
            copy_function=_copy_over,
            dirs_exist_ok=True,
        )
        link = conf / ACL_FILE
        if link.is_symlink() or (acl_link and link.exists()):
            link.unlink()
        if acl_link:
            link.symlink_to(acl_link)
    except OSError as e:
        raise ClusterError(f"cannot make the broker's home {home} from {src}: {e}") from e
    return home


def local_acl_link(conf_dir: Path, acl_file: str | None) -> str | None:
    """The link target, relative to the home's conf/, of an ACL file on this machine."""
    if not acl_file:
        return None
    return os.path.relpath(Path(acl_file).absolute(), Path(conf_dir).absolute())


def _env(home: str, user_home: Path, rocketmq_home: Path | None = None) -> dict:
    env = dict(os.environ)
    env.pop("NAMESRV_ADDR", None)  # namesrvAddr is always in the properties
    env["ROCKETMQ_HOME"] = home
    if not env.get("JAVA_HOME") and shutil.which("java"):
        # runbroker.sh and runserver.sh look for $JAVA_HOME/bin/java (else ~/jdk/java, /usr/java) and stop
        # with "Please set the JAVA_HOME variable": the java on PATH is the one meant
        env["JAVA_HOME"] = str(Path(os.path.realpath(shutil.which("java"))).parent.parent)
    user_home.mkdir(parents=True, exist_ok=True)
    env["JAVA_OPT_EXT"] = f"{java_opt_ext(java_major())} -Duser.home={user_home}"
    if rocketmq_home is not None:
        env["JAVA_OPT_EXT"] += f" -Drocketmq.home.dir={rocketmq_home}"
    return env


def java_opt_ext(major: int) -> str:
    """What the kit appends to the scripts' JVM options (user.home aside) for a java of this major version."""
    return f"{JAVA_OPT_EXT} {JAVA9_OPENS}" if major >= 9 else JAVA_OPT_EXT


@functools.lru_cache(maxsize=1)
def java_major() -> int:
    """The major version of the java the scripts will run (as runbroker.sh finds it: JAVA_HOME, else PATH)."""
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.SubprocessError):
        return 8
    return parse_java_major(out)


def parse_java_major(version_output: str) -> int:
    """`openjdk version "17.0.15"` -> 17, `java version "1.8.0_392"` -> 8."""
    m = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if not m:
        return 8
    major = int(m.group(1))
    return int(m.group(2) or 8) if major == 1 else major


def write_run_properties(run_dir: Path, node: str, conf: str | Path, overrides: dict) -> Path:
    """RUN/nodes/NODE/broker.properties as 4.9 is given it (the one writer: runfolder.write_node_properties)."""
    return rf.write_node_properties(
        run_dir,
        node,
        broker_properties(conf, overrides),
        f"{node}: {conf} with the deployment keys (written by rmqha.cluster for Apache RocketMQ)",
    )


def broker_launch(node: dict, run_dir: Path, choice: BrokerChoice) -> Launch:
    """The command that starts the broker on its run-folder properties (written when missing: a restart
    keeps what an updateBrokerConfig saved there), in a home of its own (node_home) that holds the ACL
    file those properties name."""
    check_available(choice)
    path = Path(node.get("properties") or rf.node_properties(run_dir, node["name"]))
    if not path.is_file():
        write_run_properties(run_dir, node["name"], node["conf"], node.get("overrides") or {})
    nd = rf.node_dir(run_dir, node["name"])
    try:
        props = parse_properties(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ClusterError(f"cannot read {path}: {e}") from e
    home = node_home(nd, choice.home, local_acl_link(nd / NODE_HOME / "conf", acl_file_of(props)))
    cmd = ["sh", str(Path(choice.home) / "bin" / "mqbroker"), "-c", str(path)]
    return Launch(cmd, _env(choice.home, nd, home.absolute()))


def namesrv_launch(port: int, host: str, run_dir: Path, choice: BrokerChoice) -> Launch:
    check_available(choice)
    d = rf.namesrv_log(run_dir).parent
    path = write_properties(d / "namesrv.properties", {"listenPort": str(port)}, "the name server (Apache RocketMQ)")
    return Launch(["sh", str(Path(choice.home) / "bin" / "mqnamesrv"), "-c", str(path)], _env(choice.home, d))


# ---- the java process under the scripts ---------------------------------------------------------


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except (OSError, ValueError):
        return []


def is_server_jvm(pid: int) -> bool:
    """A java process running one of RocketMQ's main classes (the scripts first run `java -version`)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            args = fh.read().split(b"\0")
    except OSError:
        return False
    return os.path.basename(args[0]) == b"java" and any(a.startswith(b"org.apache.rocketmq.") for a in args)


def find_java(pid: int) -> int | None:
    """The RocketMQ JVM started under the script pid (breadth first), or None."""
    return find_under(pid, is_server_jvm)


def find_under(pid: int, match) -> int | None:
    """The first process below pid (breadth first) for which match(pid) holds, or None."""
    todo, seen = [pid], set()
    while todo:
        p = todo.pop(0)
        if p in seen:
            continue
        seen.add(p)
        if p != pid and match(p):
            return p
        todo += _children(p)
    return None


def adopt_java(rec: dict, proc_stat, timeout: float = 20.0) -> dict:
    """The process record of the JVM the script started (its session stays the script's, so the
    backend's group signals still reach both). Raises ClusterError when no JVM appears."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        java = find_java(rec["pid"])
        if java:
            st = proc_stat(java)
            return {**rec, "pid": java, "scriptPid": rec["pid"], "startTime": st[1] if st else None}
        if proc_stat(rec["pid"]) is None:
            break
        time.sleep(0.05)
    raise ClusterError(f"{' '.join(rec.get('cmd') or [])}: no java process started (see {rec.get('log')})")


def adopt(rec: dict) -> dict:
    from ..process import proc_stat

    return adopt_java(rec, proc_stat)
