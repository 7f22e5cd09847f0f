#!/usr/bin/env bash
# dockerfile_test.sh SOURCE_DIR DISPATCHER WORKER AGENTCTL
#
# Checks SOURCE_DIR/Dockerfile against the project without a container engine. DISPATCHER,
# WORKER and AGENTCTL are built binaries of any kind (release or the sanitizer build); the
# machine running the test is Debian 12, the image's distribution, so its dpkg database
# says which Debian package each of their shared libraries comes from. Registered as the
# ctest test dockerfile_runtime_packages_cover_the_binaries.
#
# Checks, each printing one `ok:` line, or `FAIL:` lines naming what is wrong (exit 1):
#   - every shared library the binaries load (ldd) comes from a package the runtime stage
#     installs, from the base packages debian:12-slim always has (kBasePackages below), or
#     from a dependency of those (apt installs Depends); a library a binary names itself
#     (DT_NEEDED) must come from a package named in the runtime stage or a base package,
#     not only from some other package's dependency. Skipped: the sanitizer runtimes
#     (libasan, libubsan, liblsan, libtsan; sanitizer builds only), the loader and vdso;
#   - the runtime stage installs ca-certificates and tzdata;
#   - the build stage runs tools/setup and installs nothing with apt itself;
#   - the build stage builds the three targets with tools/build's release flags;
#   - the last USER is numeric 10001 (group, if given, 10001) and the user is created with
#     uid 10001 (and the group with gid 10001);
#   - the three binaries are copied from the build stage into /usr/local/bin;
#   - the runtime stage sets AGENTFLEET_CONFIG, the variable core/config reads.
#
# The Dockerfile is parsed simply: comment lines dropped, `\` continuations joined, stages
# split at FROM; the build stage is the one named `build`, the runtime stage the last one.
set -euo pipefail

if (($# != 4)); then
  echo "usage: $0 SOURCE_DIR DISPATCHER WORKER AGENTCTL" >&2
  exit 2
fi
for tool in python3 ldd readelf dpkg dpkg-query; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is not installed" >&2; exit 1; }
done
for binary in "$2" "$3" "$4"; do
  [[ -x $binary ]] || { echo "FAIL: $binary is not an executable file" >&2; exit 1; }
done
[[ -f $1/Dockerfile ]] || { echo "FAIL: no Dockerfile in $1" >&2; exit 1; }

exec python3 - "$@" <<'PY'
import json, os, re, shlex, subprocess, sys

# Packages every debian:12-slim image has, so the runtime stage need not name them. Kept
# short on purpose: the C and C++ runtimes every binary links (libc6 with libm, libgcc-s1,
# libstdc++6) and zlib1g. Each is verified below to be Essential, Priority required, or a
# dependency of those or of apt (slim keeps apt): libc6, libgcc-s1 and zlib1g come with
# the Essential set (zlib1g through dpkg), libstdc++6 with apt.
kBasePackages = ["libc6", "libgcc-s1", "libstdc++6", "zlib1g"]
kSlimImages = {"debian:12-slim", "debian:bookworm-slim"}
kSanitizerRuntimes = re.compile(r"^lib(asan|ubsan|lsan|tsan)\.so")
kUid = "10001"
kBinaryDir = "/usr/local/bin"
kConfigVariable = "AGENTFLEET_CONFIG"

source_dir, binaries = sys.argv[1], sys.argv[2:5]
failures = []


def ok(text):
    print(f"ok: {text}")


def fail(text):
    failures.append(text)
    print(f"FAIL: {text}", file=sys.stderr)


# --- The Dockerfile --------------------------------------------------------------------

def read_instructions(path):
    """(INSTRUCTION, arguments) pairs: comment lines dropped, continuations joined."""
    instructions, pending = [], ""
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if line.strip().startswith("#"):
                continue
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            pending += line
            if pending.strip():
                word, _, rest = pending.strip().partition(" ")
                instructions.append((word.upper(), rest.strip()))
            pending = ""
    if pending.strip():
        word, _, rest = pending.strip().partition(" ")
        instructions.append((word.upper(), rest.strip()))
    return instructions


class Stage:
    def __init__(self, index, image, name):
        self.index, self.image, self.name = index, image, name
        self.instructions = []

    def label(self):
        return f"stage {self.index} (FROM {self.image}{' AS ' + self.name if self.name else ''})"

    def all(self, word):
        return [args for w, args in self.instructions if w == word]


def split_stages(instructions):
    stages = []
    for word, args in instructions:
        if word == "FROM":
            parts = [p for p in args.split() if not p.startswith("--platform")]
            name = parts[2].lower() if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(len(stages), parts[0] if parts else "", name))
        elif stages:
            stages[-1].instructions.append((word, args))
    return stages


def shell_words(args):
    """The words of a RUN (shell or exec form); shell operators are words of their own."""
    if args.startswith("["):
        try:
            return [str(w) for w in json.loads(args)]
        except ValueError:
            pass
    lexer = shlex.shlex(args, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


kOperators = {"&&", "||", ";", "|", "&", ";;", "(", ")", ">", "<", ">>", ">&", "<&"}


def commands(run_args):
    """Simple commands of a RUN, each a list of words (split at shell operators)."""
    result, current = [], []
    for word in shell_words(run_args):
        if word in kOperators:
            if current:
                result.append(current)
            current = []
        else:
            current.append(word)
    if current:
        result.append(current)
    return result


def stage_commands(stage):
    return [c for args in stage.all("RUN") for c in commands(args)]


def apt_installed(stage):
    """Packages named by apt-get/apt install in a stage (versions and archs stripped)."""
    packages = []
    for cmd in stage_commands(stage):
        while cmd and ("=" in cmd[0] and not cmd[0].startswith("-")):  # VAR=value prefixes
            cmd = cmd[1:]
        if len(cmd) < 2 or os.path.basename(cmd[0]) not in ("apt-get", "apt"):
            continue
        words, i = cmd[1:], 0
        while i < len(words) and words[i].startswith("-"):
            i += 2 if words[i] in ("-o", "-t", "-c") else 1
        if i >= len(words) or words[i] != "install":
            continue
        i += 1
        while i < len(words):
            w = words[i]
            if w in ("-o", "-t", "-c"):
                i += 2
                continue
            if not w.startswith("-"):
                packages.append(re.split(r"[=:/]", w, 1)[0])
            i += 1
    return packages


def option_value(cmd, short, long):
    for i, w in enumerate(cmd):
        if w in (short, long) and i + 1 < len(cmd):
            return cmd[i + 1]
        if w.startswith(long + "="):
            return w.split("=", 1)[1]
    return None


dockerfile = os.path.join(source_dir, "Dockerfile")
stages = split_stages(read_instructions(dockerfile))
if not stages:
    print(f"FAIL: {dockerfile} has no FROM", file=sys.stderr)
    sys.exit(1)
runtime = stages[-1]
build = next((s for s in stages if s.name == "build"), None)
if build is None or build is runtime:
    print(f"FAIL: {dockerfile} has no build stage (`FROM ... AS build`) before the runtime stage",
          file=sys.stderr)
    sys.exit(1)
runtime_packages = apt_installed(runtime)

# --- The Debian package database of this machine ---------------------------------------

def dpkg_database():
    """name -> {essential, priority, depends: [[alternatives]], provides}."""
    out = subprocess.run(
        ["dpkg-query", "-W", "-f",
         "${Package}\t${db:Status-Status}\t${Essential}\t${Priority}\t${Pre-Depends}\t"
         "${Depends}\t${Provides}\n"],
        check=True, capture_output=True, text=True).stdout
    packages, providers = {}, {}
    for line in out.splitlines():
        name, status, essential, priority, pre, depends, provides = (line.split("\t") + [""] * 7)[:7]
        if status != "installed":
            continue
        entry = packages.setdefault(name, {"essential": False, "priority": priority,
                                           "depends": []})
        entry["essential"] |= essential == "yes"
        for field in (pre, depends):
            for clause in filter(None, (c.strip() for c in field.split(","))):
                entry["depends"].append([re.split(r"[\s(:]", a.strip(), 1)[0]
                                         for a in clause.split("|")])
        for p in filter(None, (p.strip() for p in provides.split(","))):
            providers.setdefault(re.split(r"[\s(:]", p, 1)[0], []).append(name)
    return packages, providers


packages, providers = dpkg_database()


def closure(roots):
    """Packages apt installs for roots: Depends and Pre-Depends, first alternative (apt's
    choice), virtual names resolved through Provides."""
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name not in packages and name in providers:
            name = providers[name][0]
        if name in seen:
            continue
        seen.add(name)
        for alternatives in packages.get(name, {}).get("depends", []):
            todo.append(alternatives[0])
    return seen


def packages_of(paths):
    """path -> the Debian package shipping it (None if none), with one dpkg-query call.
    Merged /usr: a library resolved under /lib may be recorded under /usr/lib, or the
    other way round, and through a symlink; all spellings are tried."""
    spellings = {}
    for path in paths:
        candidates = []
        for p in (path, os.path.realpath(path)):
            candidates.append(p)
            if p.startswith("/usr/lib/") or p.startswith("/usr/lib64/"):
                candidates.append(p[len("/usr"):])
            elif p.startswith("/lib/") or p.startswith("/lib64/"):
                candidates.append("/usr" + p)
        spellings[path] = list(dict.fromkeys(candidates))
    wanted = sorted({c for cs in spellings.values() for c in cs})
    owner = {}
    if wanted:
        # Exit status 1 when some spelling is unknown to dpkg; the known ones still print.
        out = subprocess.run(["dpkg-query", "-S", *wanted], capture_output=True, text=True).stdout
        for line in out.splitlines():
            owners, sep, owned = line.rpartition(": ")
            if sep and not line.startswith("diversion"):
                owner[owned] = owners.split(",")[0].strip().split(":")[0]
    return {path: next((owner[c] for c in cs if c in owner), None)
            for path, cs in spellings.items()}


# --- Check: runtime packages cover the binaries' shared libraries ----------------------

def check_base_packages():
    essential = [n for n, e in packages.items() if e["essential"] or e["priority"] == "required"]
    base_closure = closure(essential + ["apt"])
    good = True
    for name in kBasePackages:
        if name not in packages:
            fail(f"base package {name} is not installed here, so it cannot be checked")
            good = False
        elif name not in base_closure:
            fail(f"base package {name} is neither Essential, Priority required, nor a dependency "
                 f"of those or of apt: debian:12-slim may lack it; install it in the runtime stage")
            good = False
    return good


def check_libraries():
    image = runtime.image.split("@")[0]
    if image not in kSlimImages:
        fail(f"the runtime stage is FROM {runtime.image}, not debian:12-slim: the base package "
             f"list {kBasePackages} is only known to hold there")
        return
    if not runtime_packages:
        fail(f"the runtime {runtime.label()} installs no packages with apt-get install")
        return
    if not check_base_packages():
        return
    named = set(runtime_packages) | set(kBasePackages)
    covered = closure(named)
    skipped, problems, loaded = set(), [], []  # loaded: (binary, soname, path, direct)
    for binary in binaries:
        shown = os.path.basename(binary)
        needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]",
                                subprocess.run(["readelf", "-d", binary], check=True,
                                               capture_output=True, text=True).stdout))
        ldd = subprocess.run(["ldd", binary], capture_output=True, text=True)
        if ldd.returncode != 0:
            problems.append(f"ldd {binary} failed: {ldd.stderr.strip() or ldd.stdout.strip()}")
            continue
        for line in ldd.stdout.splitlines():
            m = re.match(r"\s*(\S+)\s+=>\s+(.*?)\s*(\(0x[0-9a-f]+\))?$", line)
            if not m:
                continue  # the vdso and the dynamic loader have no `=>`
            soname, path = m.group(1), m.group(2)
            if kSanitizerRuntimes.match(soname):
                skipped.add(soname)
            elif path == "not found":
                problems.append(f"{shown}: {soname} is not found on this machine (ldd)")
            else:
                loaded.append((shown, soname, path, soname in needed))
    package = packages_of({path for _, _, path, _ in loaded})
    # One problem per package: {package: ({sonames}, {binaries})}, by kind.
    orphans, direct_only_dependency, direct_missing, missing = {}, {}, {}, {}
    for shown, soname, path, direct in loaded:
        owner = package[path]
        if owner is None:
            orphans.setdefault(path, (set(), set()))[1].add(shown)
            continue
        if direct and owner not in named:
            kind = direct_only_dependency if owner in covered else direct_missing
        elif owner not in covered:
            kind = missing
        else:
            continue
        kind.setdefault(owner, (set(), set()))[0].add(soname)
        kind[owner][1].add(shown)

    def names(items):
        return ", ".join(sorted(items))

    for path, (_, users) in sorted(orphans.items()):
        problems.append(f"{path} (loaded by {names(users)}) belongs to no Debian package, so "
                        f"the runtime stage cannot install it")
    for owner, (sonames, users) in sorted(direct_missing.items()):
        problems.append(f"package {owner} is not installed by the runtime stage: add it to its "
                        f"apt-get install ({names(sonames)}, linked by {names(users)})")
    for owner, (sonames, users) in sorted(direct_only_dependency.items()):
        problems.append(f"package {owner} arrives only as another package's dependency, but "
                        f"{names(users)} link {names(sonames)} directly: name {owner} in the "
                        f"runtime stage's apt-get install")
    for owner, (sonames, users) in sorted(missing.items()):
        problems.append(f"package {owner} is not installed by the runtime stage (neither named "
                        f"nor a dependency of a named or base package): add it to its apt-get "
                        f"install ({names(sonames)}, loaded by {names(users)})")
    libraries = len({soname for _, soname, _, _ in loaded})
    for problem in dict.fromkeys(problems):
        fail(problem)
    if not problems:
        note = f"; skipped sanitizer runtimes {', '.join(sorted(skipped))}" if skipped else ""
        ok(f"runtime packages {' '.join(runtime_packages)} (with base {' '.join(kBasePackages)}) "
           f"cover the {libraries} shared libraries of {', '.join(map(os.path.basename, binaries))}"
           f"{note}")


check_libraries()

# --- Check: certificates and zones -----------------------------------------------------

missing = [p for p in ("ca-certificates", "tzdata") if p not in runtime_packages]
if missing:
    fail(f"the runtime stage does not apt-get install {' '.join(missing)} (ca-certificates: HTTPS "
         f"model endpoints and Kafka TLS; tzdata: IANA zones in /usr/share/zoneinfo)")
else:
    ok("the runtime stage installs ca-certificates and tzdata")

# --- Check: the build stage installs through tools/setup -------------------------------

setup_runs = [c for c in stage_commands(build)
              if any(re.search(r"(^|/)tools/setup$", w) for w in c[:2])]
own_apt = apt_installed(build)
if not os.path.isfile(os.path.join(source_dir, "tools", "setup")):
    fail(f"{source_dir}/tools/setup does not exist")
elif not setup_runs:
    fail(f"the build {build.label()} does not RUN tools/setup")
elif own_apt:
    fail(f"the build stage apt-get installs {' '.join(own_apt)} itself; tools/setup is the one "
         f"list of build packages: add them there")
else:
    ok("the build stage installs its packages by running tools/setup")

# --- Check: the build stage builds the three targets, release flags --------------------

targets = ["agentfleet-dispatcher", "agentfleet-worker", "agentctl"]
build_words = [w for c in stage_commands(build) for w in c]
release_flags = []
tools_build = os.path.join(source_dir, "tools", "build")
if os.path.isfile(tools_build):
    with open(tools_build, encoding="utf-8") as f:
        m = re.search(r"^\s*release\)\s*flags=\(([^)]*)\)", f.read(), re.M)
        if m:
            release_flags = shlex.split(m.group(1))
built = [c for c in stage_commands(build) if c[:2] == ["cmake", "--build"]]
unbuilt = [t for t in targets if not any(t in c for c in built)]
if not release_flags:
    fail("cannot read the release flags (`release) flags=(...)`) from tools/build")
elif unbuilt:
    fail(f"the build stage's `cmake --build` does not build {' '.join(unbuilt)}")
elif any(f not in build_words for f in release_flags):
    fail(f"the build stage does not configure with tools/build's release flags: missing "
         f"{' '.join(f for f in release_flags if f not in build_words)}")
else:
    ok(f"the build stage builds {' '.join(targets)} with {' '.join(release_flags)}")

# --- Check: non-root user 10001 --------------------------------------------------------

users = runtime.all("USER")
runtime_cmds = stage_commands(runtime)
created_uid = [c for c in runtime_cmds if c and c[0] in ("useradd", "adduser")
               and option_value(c, "-u", "--uid") == kUid]
created_gid = [c for c in runtime_cmds if c and c[0] in ("groupadd", "addgroup")
               and option_value(c, "-g", "--gid") == kUid]
if not users:
    fail("the runtime stage has no USER: the image would run as root")
else:
    user = users[-1].split()[0] if users[-1].split() else ""
    uid, _, gid = user.partition(":")
    if not uid.isdigit() or (gid and not gid.isdigit()):
        fail(f"the last USER is `{user}`; it must be numeric (USER {kUid}:{kUid}) so that "
             f"runAsNonRoot can verify it")
    elif uid != kUid or (gid and gid != kUid):
        fail(f"the last USER is `{user}`, not {kUid}:{kUid} (the chart's runAsUser/runAsGroup)")
    elif not created_uid:
        fail(f"no useradd in the runtime stage creates the user with --uid {kUid}")
    elif gid and not created_gid:
        fail(f"USER names group {gid} but no groupadd in the runtime stage creates it with "
             f"--gid {gid}")
    else:
        ok(f"the image runs as USER {user}, created by useradd --uid {kUid}")

# --- Check: the three binaries are copied into the runtime stage -----------------------

copied = set()
for args in runtime.all("COPY"):
    words = shlex.split(args)
    flags = [w for w in words if w.startswith("--")]
    rest = [w for w in words if not w.startswith("--")]
    origin = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), None)
    if origin is None or len(rest) < 2:
        continue
    if origin.lower() != "build" and origin != str(build.index):
        continue
    *sources, dest = rest
    if dest.rstrip("/") == kBinaryDir:
        copied.update(os.path.basename(s.rstrip("/")) for s in sources)
    elif os.path.dirname(dest) == kBinaryDir and len(sources) == 1:
        copied.add(os.path.basename(dest))
missing = [t for t in targets if t not in copied]
if missing:
    fail(f"the runtime stage does not COPY --from=build {' '.join(missing)} into {kBinaryDir}/ "
         f"(name each binary as a source)")
else:
    ok(f"the runtime stage copies {' '.join(targets)} from the build stage into {kBinaryDir}")

# --- Check: AGENTFLEET_CONFIG ----------------------------------------------------------

env_names = set()
for args in runtime.all("ENV"):
    words = shlex.split(args)
    if words and "=" not in words[0]:
        env_names.add(words[0])  # legacy `ENV NAME value`
    else:
        env_names.update(w.split("=", 1)[0] for w in words if "=" in w)
config_dir = os.path.join(source_dir, "core", "config")
read_by_source = any(
    f'getenv("{kConfigVariable}")' in open(os.path.join(config_dir, n), encoding="utf-8").read()
    for n in os.listdir(config_dir) if n.endswith(".cpp")) if os.path.isdir(config_dir) else False
if not read_by_source:
    fail(f"core/config no longer reads getenv(\"{kConfigVariable}\"); update the Dockerfile's ENV "
         f"and this test")
elif kConfigVariable not in env_names:
    fail(f"the runtime stage does not set ENV {kConfigVariable} (the default configuration path "
         f"the binaries read)")
else:
    ok(f"the runtime stage sets {kConfigVariable}, which core/config reads")

sys.exit(1 if failures else 0)
PY
