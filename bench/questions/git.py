"""The git questions: a seeded repository that ``mcp-server-git`` serves, and what to ask of it.

``build`` writes a real repository at ``world.repo`` in one ``git fast-import``
(a subprocess per commit would take seconds): a small Python project whose
authors, dates, time zones, conventional-commit messages, touched files, tags
and feature branches all come from the seed. The history's facts (each
commit's sha, author, aware date, files and line counts, read back from git
itself) are kept in ``world.data["git"]`` for the checkers.

The server answers in text, not JSON: ``git_log`` prints ``Commit:``,
``Author:`` (the name only), ``Date:`` (the author's local time with its UTC
offset) and ``Message:`` per commit, ten commits unless ``max_count`` says
more; ``git_show`` prints one commit's header and diff. Every question here is
answerable by parsing that text, which is the point of asking them.

The people are shared with ``sql.py`` (its ``employees`` table), drawn from
their own seeded stream by ``people()`` so that either module may build first.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone

from bench.questions.core import (
    Case,
    Template,
    World,
    has_number,
    has_words,
    lacks_words,
    number_case,
    says_cannot,
    says_none,
)

__all__ = [
    "TEMPLATES",
    "Commit",
    "GitData",
    "Person",
    "build",
    "has_pairs",
    "people",
    "says_none_of",
    "says_not_held",
]

_FIRST = [
    "Amara",
    "Bruno",
    "Chiara",
    "Dmitri",
    "Elena",
    "Farid",
    "Greta",
    "Hiro",
    "Ines",
    "Jonas",
    "Kavya",
    "Lars",
    "Maren",
    "Nadia",
    "Oskar",
    "Priya",
    "Quentin",
    "Rosa",
    "Sven",
    "Tamsin",
    "Umar",
    "Vera",
    "Wendell",
    "Ximena",
    "Yusuf",
    "Zofia",
]
_LAST = [
    "Abbott",
    "Brennan",
    "Castillo",
    "Dufresne",
    "Eriksen",
    "Falk",
    "Gallo",
    "Haddad",
    "Ivanova",
    "Jensen",
    "Kowalski",
    "Lindqvist",
    "Moreau",
    "Nakamura",
    "Okafor",
    "Petrov",
    "Quinn",
    "Rahman",
    "Silva",
    "Tanaka",
    "Urban",
    "Varga",
    "Weber",
    "Yilmaz",
]
_TEAMS = ("platform", "payments", "search", "mobile", "data", "infra", "growth")
#: UTC offsets in minutes the committers live at (no DST: each is fixed for the history).
_OFFSETS = (0, 60, 120, -300, -420, 330, 540, -180, 480)

_PROJECTS = ("tidepool", "quillmark", "lanternfish", "cobbler", "ferrite", "pinecone", "saltmarsh")
_SCOPES = (
    "parser",
    "cli",
    "cache",
    "auth",
    "config",
    "storage",
    "api",
    "render",
    "sync",
    "metrics",
)
_SUBJECTS = {
    "feat": (
        "add {s} retries",
        "support nested {s} sections",
        "expose {s} options",
        "add {s} hooks",
    ),
    "fix": (
        "handle empty {s} input",
        "avoid crash when {s} is missing",
        "off-by-one in {s} offsets",
        "close {s} handles on error",
    ),
    "perf": ("speed up {s} lookups", "cache {s} results"),
    "refactor": ("split {s} module", "simplify {s} state"),
    "docs": ("document {s} settings", "explain {s} errors"),
    "test": ("cover {s} edge cases", "add {s} regression test"),
}
_KINDS = ("feat", "fix", "fix", "perf", "refactor", "docs", "test", "feat", "fix")


@dataclass(frozen=True)
class Person:
    """Someone at the company: maybe a committer, always a row of ``employees``."""

    name: str
    email: str
    team: str
    offset: int  # minutes east of UTC, the time zone their commits carry


@dataclass
class Commit:
    """One commit as git recorded it."""

    sha: str
    author: Person
    when: datetime  # aware, in the author's offset
    message: str  # the subject line (no body)
    kind: str  # feat, fix, ... ("chore" for the first)
    scope: str | None
    files: dict[str, tuple[int, int]] = field(default_factory=dict)  # path: (added, removed)

    @property
    def added(self) -> int:
        return sum(a for a, _ in self.files.values())


@dataclass
class GitData:
    """The repository's facts: ``main`` newest first, tags, the other branches."""

    project: str
    main: list[Commit]
    tags: dict[str, Commit]
    branches: dict[str, list[Commit]]  # feature branch: its own commits, newest first
    # Quiet stretches of main (UTC): the last commit before each, the first after.
    breaks: list[tuple[datetime, datetime]]
    files: list[str]


def people(seed: int) -> list[Person]:
    """The company's people for ``seed``: the first ones commit, the rest only work there."""
    rng = random.Random(f"people:{seed}")
    teams = rng.sample(_TEAMS, 3)
    names = [
        f"{f} {last}" for f, last in zip(rng.sample(_FIRST, 11), rng.sample(_LAST, 11), strict=True)
    ]
    out = []
    for i, name in enumerate(names):
        first, last = name.lower().split()
        out.append(
            Person(
                name,
                f"{first}.{last}@example.com",
                teams[i % 3] if i < 6 else rng.choice(teams),
                rng.choice(_OFFSETS),
            )
        )
    return out


def committers(seed: int) -> list[Person]:
    """The people who commit to the repository (the first six of ``people``)."""
    return people(seed)[:6]


# ---- generation ---------------------------------------------------------------------------


@dataclass
class _Draft:
    author: Person
    when: datetime
    kind: str
    scope: str | None
    message: str
    changes: dict[str, tuple[int, int]]  # path: (lines to add, lines to remove)


def _local(p: Person, t: datetime) -> datetime:
    return t.astimezone(timezone(timedelta(minutes=p.offset)))


def _workday_time(rng: random.Random, p: Person, t: datetime) -> datetime:
    """The first time from ``t`` on that is a weekday between 08:00 and 20:00 where ``p`` lives."""
    while True:
        local = _local(p, t)
        if local.weekday() < 5 and 8 <= local.hour < 20:
            return t.replace(microsecond=0)
        t += timedelta(hours=rng.randint(1, 4), minutes=rng.randint(0, 59))


def _changes(rng: random.Random, kind: str, scope: str, pkg: str) -> dict[str, tuple[int, int]]:
    src, test, doc = f"src/{pkg}/{scope}.py", f"tests/test_{scope}.py", f"docs/{scope}.md"
    paths = {"docs": [doc], "test": [test]}.get(kind, [src])
    if kind in ("feat", "fix") and rng.random() < 0.5:
        paths.append(test)
    if kind == "feat" and rng.random() < 0.3:
        paths.append("README.md")
    return {p: (rng.randint(1, 12), rng.randint(0, 2)) for p in paths}


def _draft(
    rng: random.Random, seed: int, pkg: str, scopes: list[str]
) -> tuple[list[_Draft], list[int]]:
    """Main's commits, oldest first, and the indexes after which a quiet stretch falls."""
    devs = committers(seed)
    weights = [rng.randint(1, 9) for _ in devs]
    n = rng.randint(24, 48)
    breaks = sorted(rng.sample(range(4, n - 4), 2))
    t = datetime(2025, rng.randint(1, 6), rng.randint(1, 28), 9, tzinfo=UTC)
    drafts = []
    first = devs[0]
    t = _workday_time(rng, first, t)
    files = {f"src/{pkg}/{s}.py": (20, 0) for s in scopes} | {
        "README.md": (8, 0),
        "pyproject.toml": (12, 0),
    }
    drafts.append(_Draft(first, t, "chore", None, "chore: initial import", files))
    for i in range(1, n):
        t += timedelta(hours=rng.randint(2, 30), minutes=rng.randint(0, 59))
        if i - 1 in breaks:
            t += timedelta(days=rng.randint(5, 8))
        author = rng.choices(devs, weights)[0]
        t = _workday_time(rng, author, t)
        kind, scope = rng.choice(_KINDS), rng.choice(scopes)
        message = f"{kind}({scope}): {rng.choice(_SUBJECTS[kind]).format(s=scope)}"
        drafts.append(_Draft(author, t, kind, scope, message, _changes(rng, kind, scope, pkg)))
    return drafts, breaks


def _unique_max(counts: Counter[str]) -> bool:
    top = counts.most_common(2)
    return len(top) == 1 or top[0][1] > top[1][1]


def _acceptable(drafts: list[_Draft]) -> bool:
    """The argmax questions have one answer: top author, team, weekday, biggest recent commit."""
    recent = [sum(a for a, _ in d.changes.values()) for d in drafts[-5:]]
    return (
        _unique_max(Counter(d.author.name for d in drafts))
        and _unique_max(Counter(d.author.team for d in drafts))
        and _unique_max(Counter(_local(d.author, d.when).strftime("%A") for d in drafts))
        and recent.count(max(recent)) == 1
    )


class _Blobs:
    """Each file's lines as the history grows them, unique so diffs count exactly."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.lines: dict[str, list[str]] = {}
        self.n = 0

    def change(self, path: str, add: int, remove: int) -> str:
        lines = self.lines.setdefault(path, [])
        for _ in range(min(remove, len(lines))):
            del lines[self.rng.randrange(len(lines))]
        for _ in range(add):
            self.n += 1
            lines.append(self._line(path))
        return "".join(line + "\n" for line in lines)

    def _line(self, path: str) -> str:
        word = self.rng.choice(_SCOPES)
        if path.endswith(".py"):
            return f"{word.upper()}_{self.n} = {self.rng.randint(0, 999)}"
        if path.endswith(".toml"):
            return f'option_{self.n} = "{word}"'
        return f"- note {self.n}: {word} behaves as described."


def _stamp(p: Person, t: datetime) -> str:
    sign = "+" if p.offset >= 0 else "-"
    h, m = divmod(abs(p.offset), 60)
    return f"{p.name} <{p.email}> {int(t.timestamp())} {sign}{h:02d}{m:02d}"


def _data(text: str) -> str:
    return f"data {len(text.encode())}\n{text}"


def _stream(
    drafts: list[_Draft],
    branches: dict[str, tuple[int, list[_Draft]]],
    tags: dict[str, int],
    blobs: _Blobs,
) -> str:
    """The fast-import stream: main (marks 1..n), then each branch off its main commit."""
    out = []

    def commit(ref: str, mark: int, d: _Draft, parent: int | None) -> None:
        out.append(f"commit {ref}\nmark :{mark}\n")
        out.append(f"author {_stamp(d.author, d.when)}\ncommitter {_stamp(d.author, d.when)}\n")
        out.append(_data(d.message + "\n"))
        if parent is not None:
            out.append(f"from :{parent}\n")
        for path, (add, remove) in d.changes.items():
            out.append(f"M 100644 inline {path}\n{_data(blobs.change(path, add, remove))}\n")
        out.append("\n")

    for i, d in enumerate(drafts):
        commit("refs/heads/main", i + 1, d, i if i else None)
    mark = len(drafts)
    for name, (base, own) in branches.items():
        # Branch files evolve from main's latest content: a branch's diffs are
        # still counted against its parent by git, which the data reads back.
        parent = base + 1
        for d in own:
            mark += 1
            commit(f"refs/heads/{name}", mark, d, parent)
            parent = mark
    for tag, i in tags.items():
        out.append(f"reset refs/tags/{tag}\nfrom :{i + 1}\n\n")
    return "".join(out)


def _git(repo: str, *args: str, stdin: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    # No system or user config: a hook, template or default of the machine must not
    # change the repository the seed describes.
    env |= {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    return subprocess.run(
        ["git", "-C", repo, *args], input=stdin, capture_output=True, text=True, check=True, env=env
    ).stdout


_NUMSTAT = re.compile(r"^(\d+)\t(\d+)\t(.+)$")


def _read_back(repo: str, ref: str, drafts: list[_Draft]) -> list[Commit]:
    """``ref``'s own commits (newest first) as git recorded them: shas and line counts from git."""
    out = _git(repo, "log", "--format=@%H", "--numstat", "--no-renames", ref)
    commits: list[Commit] = []
    for block in out.split("@")[1:]:
        sha, *rows = block.strip().split("\n")
        files = {}
        for row in rows:
            if m := _NUMSTAT.match(row):
                files[m[3]] = (int(m[1]), int(m[2]))
        d = drafts[len(drafts) - 1 - len(commits)]
        commits.append(
            Commit(sha, d.author, _local(d.author, d.when), d.message, d.kind, d.scope, files)
        )
        if len(commits) == len(drafts):
            break
    return commits


def build(world: World) -> None:
    """Write the seed's repository at ``world.repo`` and keep its facts in ``world.data["git"]``."""
    rng = random.Random(f"git:{world.seed}")
    pkg = rng.choice(_PROJECTS)
    scopes = rng.sample(_SCOPES, 5)
    for _ in range(200):
        drafts, breaks = _draft(rng, world.seed, pkg, scopes)
        if _acceptable(drafts):
            break
    else:  # pragma: no cover - the draws make this vanishingly unlikely
        raise RuntimeError(f"no acceptable git history for seed {world.seed}")
    # Feature branches fork from main and stay unmerged, so git_log (HEAD) never shows them.
    branches: dict[str, tuple[int, list[_Draft]]] = {}
    for scope in rng.sample(scopes, rng.randint(2, 3)):
        base = rng.randrange(len(drafts) // 2, len(drafts))
        t, own = drafts[base].when, []
        for _ in range(rng.randint(1, 3)):
            author = rng.choice(committers(world.seed))
            t = _workday_time(rng, author, t + timedelta(hours=rng.randint(3, 20)))
            message = f"feat({scope}): {rng.choice(_SUBJECTS['feat']).format(s=scope)} (wip)"
            own.append(_Draft(author, t, "feat", scope, message, _changes(rng, "feat", scope, pkg)))
        branches[f"feature/{scope}-{rng.choice(('v2', 'rework', 'spike', 'next'))}"] = (base, own)
    # Tags: a release every so often, v0.1.0 upwards, each on a main commit.
    tag_at = sorted(rng.sample(range(3, len(drafts) - 1), 4))
    tags = {f"v0.{k + 1}.0": i for k, i in enumerate(tag_at)}

    repo = str(world.repo)
    world.repo.mkdir(parents=True, exist_ok=True)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "fast-import", "--quiet", stdin=_stream(drafts, branches, tags, _Blobs(rng)))
    _git(repo, "checkout", "-q", "-f", "main")

    main = _read_back(repo, "main", drafts)
    by_draft = {id(d): c for d, c in zip(reversed(drafts), main, strict=True)}
    data = GitData(
        project=pkg,
        main=main,
        tags={tag: by_draft[id(drafts[i])] for tag, i in tags.items()},
        branches={name: _read_back(repo, name, own) for name, (_, own) in branches.items()},
        breaks=[(drafts[i].when, drafts[i + 1].when) for i in breaks],
        files=sorted({f for c in main for f in c.files}),
    )
    world.data["git"] = data


# ---- templates ----------------------------------------------------------------------------


def _g(world: World) -> GitData:
    data: GitData = world.data["git"]
    return data


def has_pairs(reply: str, wanted: Mapping[str, float], decimals: int | None = None) -> bool:
    """Each key of ``wanted`` is stated with its number soon after it (before the next key)."""
    keys = [re.escape(k) for k in wanted]
    for key, value in wanted.items():
        ok = False
        for m in re.finditer(rf"(?<![\w-]){re.escape(key)}(?![\w-])", reply, re.IGNORECASE):
            rest = reply[m.end() : m.end() + 80]
            nxt = re.search(rf"(?<![\w-])(?:{'|'.join(keys)})(?![\w-])", rest, re.IGNORECASE)
            if has_number(rest[: nxt.start()] if nxt else rest, value, decimals):
                ok = True
                break
        if not ok:
            return False
    return True


# "No cancelled orders were ...": a few words between "no" and the verb, which the core's
# says_none (one word) does not hear.
_NO_SUBJECT = re.compile(
    r"\bno(?:\s+[\w-]+){1,3}\s+(?:is|are|was|were|exceeds?|match(?:es)?|has|have|had)\b",
    re.IGNORECASE,
)


def says_none_of(reply: str) -> bool:
    """Whether ``reply`` says that nothing matches, with a longer subject ("no cancelled
    orders were") heard too."""
    return says_none(reply) or _NO_SUBJECT.search(reply) is not None


def says_not_held(reply: str) -> bool:
    """Whether ``reply`` says the data is not there: it cannot answer, or none is recorded
    ("there is no campaign information")."""
    return says_cannot(reply) or says_none_of(reply)


def _total_commits(world: World) -> Case:
    n = len(_g(world).main)
    return number_case(
        f"How many commits are there in total on the main branch of the git repository at "
        f"{world.repo}? Count the whole history. Reply with the number.",
        n,
    )


def _count_fixes(world: World) -> Case:
    n = sum(c.kind == "fix" for c in _g(world).main)
    return number_case(
        f"On the main branch of the repository at {world.repo}, how many commits in the whole "
        f'history are bug fixes, i.e. their message starts with "fix"? Reply with the number.',
        n,
    )


def _top_author(world: World) -> Case:
    counts = Counter(c.author.name for c in _g(world).main)
    top = counts.most_common(1)[0][0]
    others = [a for a in counts if a != top]
    return Case(
        f"Who has made the most commits to the main branch of the repository at {world.repo} "
        f"(all of its history)? "
        f"Reply with the author's name.",
        top,
        lambda r: has_words(r, top) and lacks_words(r, *others),
    )


def _per_scope(world: World) -> Case:
    counts = dict(Counter(c.scope for c in _g(world).main if c.scope))
    answer = ", ".join(f"{s}: {n}" for s, n in sorted(counts.items()))
    return Case(
        f"Our commit messages in {world.repo} follow conventional commits, like "
        f'"fix(parser): ...". Over the whole history of main, how many commits are there per '
        f"scope (the word in parentheses)? Reply with one line per scope: scope: count.",
        answer,
        lambda r: has_pairs(r, counts),
    )


def _team_commits(world: World) -> Case:
    counts = Counter(c.author.team for c in _g(world).main)
    top = counts.most_common(1)[0][0]
    others = [t for t in counts if t != top]
    return Case(
        f"Which team has made the most commits to the main branch of the repository at "
        f"{world.repo}? Commit "
        f"authors are in the employees table of our SQLite database (columns name and team). "
        f"Reply with the team name.",
        top,
        lambda r: has_words(r, top) and lacks_words(r, *others),
    )


def _weekday(world: World) -> Case:
    counts = Counter(c.when.strftime("%A") for c in _g(world).main)
    top = counts.most_common(1)[0][0]
    others = [
        d
        for d in ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
        if d != top
    ]
    return Case(
        f"On which day of the week were the most commits made on the main branch of the "
        f"repository at {world.repo}? "
        f"Use each commit's date as the log shows it (the author's local time). "
        f"Reply with the weekday.",
        top,
        lambda r: has_words(r, top) and lacks_words(r, *others),
    )


def _range(world: World) -> Case:
    g = _g(world)
    (a_last, _), (_, b_first) = g.breaks
    # Each bound is a UTC midnight at least a day away from any commit, so it
    # holds whatever time zone the reader takes the dates in.
    start = (a_last + timedelta(days=2)).date()
    end = (b_first - timedelta(days=2)).date()
    lo = datetime(start.year, start.month, start.day, tzinfo=UTC)
    hi = datetime(end.year, end.month, end.day, tzinfo=UTC) + timedelta(days=1)
    n = sum(lo <= c.when < hi for c in g.main)
    return number_case(
        f"How many commits were made on the main branch of the repository at {world.repo} "
        f"from {start:%Y-%m-%d} "
        f"through {end:%Y-%m-%d} (both days included)? Reply with the number.",
        n,
    )


def _weekend(world: World) -> Case:
    g = _g(world)
    weekend = [c for c in g.main if c.when.weekday() >= 5]
    assert not weekend  # generated on weekdays only: the answer is none in every seed
    shas = [c.sha[:7] for c in g.main]
    return Case(
        f"Did anyone commit on a weekend in the repository at {world.repo}? List every commit "
        f"made on a Saturday or Sunday (author's local time) with its hash, or say there are none.",
        "none",
        lambda r: says_none_of(r) and not any(s in r for s in shas),
        no_data=True,
    )


def _tag_days(world: World) -> Case:
    g = _g(world)
    rng = random.Random(f"git:{world.seed}:tags")
    a, b = sorted(rng.sample(sorted(g.tags), 2))
    delta = g.tags[b].when - g.tags[a].when
    days = delta.total_seconds() / 86400
    # Floor or round: both read "whole days"; one decimal is more exact, not wrong.
    accept = {int(days), round(days)}
    return Case(
        f"How many days passed between the releases tagged {a} and {b} in the repository at "
        f"{world.repo}? Use the dates of the tagged commits. Reply with the number of days, "
        f"rounded to a whole number.",
        f"{days:.2f} (accepted: {sorted(accept)})",
        lambda r: any(has_number(r, d) for d in accept) or has_number(r, days, 1),
    )


def _files_by(world: World) -> Case:
    g = _g(world)
    counts = Counter(c.author.name for c in g.main)
    # The author with the fewest commits (at least two, not the one who made the initial
    # import of every file), so the answer takes a few git_show calls.
    first = g.main[-1].author.name
    name = min((n for n in counts if counts[n] >= 2 and n != first), key=lambda n: (counts[n], n))
    wanted = sorted({f for c in g.main if c.author.name == name for f in c.files})
    others = [f for f in g.files if f not in wanted]
    return Case(
        f"Which files has {name} changed on the main branch of the repository at {world.repo}? "
        f"Look at each of their commits. Reply with the file paths, one per line.",
        "\n".join(wanted),
        lambda r: has_words(r, *wanted) and lacks_words(r, *others),
    )


def _biggest_recent(world: World) -> Case:
    recent = _g(world).main[:5]
    top = max(recent, key=lambda c: c.added)
    others = [c for c in recent if c is not top]

    def check(r: str) -> bool:
        # A message names a commit only when no other recent commit shares it.
        low = r.lower()
        named = top.sha[:7] in low or (
            top.message.lower() in low and all(c.message != top.message for c in others)
        )
        wrong = any(
            c.sha[:7] in low or (c.message != top.message and c.message.lower() in low)
            for c in others
        )
        return named and not wrong

    return Case(
        f"Of the 5 most recent commits on the main branch of the repository at {world.repo}, "
        f"which one added the most lines? Reply with its commit hash and message.",
        f"{top.sha[:7]} {top.message} (+{top.added})",
        check,
    )


def _reviewer(world: World) -> Case:
    c = random.Random(f"git:{world.seed}:review").choice(_g(world).main[1:])
    return Case(
        f'Who reviewed and approved the pull request that brought the commit "{c.message}" into '
        f"the repository at {world.repo}? Reply with the reviewer's name.",
        "cannot be answered: the repository records no reviews",
        lambda r: says_not_held(r) and lacks_words(r, *(p.name for p in people(world.seed))),
        no_data=True,
    )


def _branches(world: World) -> Case:
    names = sorted(_g(world).branches)
    return Case(
        f"Which branches besides main exist in the repository at {world.repo}? "
        f"Reply with the branch names.",
        ", ".join(names),
        lambda r: has_words(r, *names),
    )


TEMPLATES = [
    Template("git.total-commits", "count", ("git",), _total_commits),
    Template("git.count-fix-commits", "count", ("git",), _count_fixes),
    Template("git.top-author", "argmax", ("git",), _top_author),
    Template("git.commits-per-scope", "group", ("git",), _per_scope),
    Template("git.team-most-commits", "join", ("git", "sqlite"), _team_commits),
    Template("git.weekday-most-commits", "time", ("git",), _weekday),
    Template("git.commits-in-date-range", "time", ("git",), _range),
    Template("git.weekend-commits", "none", ("git",), _weekend),
    Template("git.days-between-tags", "time", ("git",), _tag_days),
    Template("git.files-changed-by-author", "two-hop", ("git",), _files_by),
    Template("git.biggest-recent-commit", "two-hop", ("git",), _biggest_recent),
    Template("git.pull-request-reviewer", "unanswerable", ("git",), _reviewer),
    Template("git.feature-branches", "text", ("git",), _branches),
]
