"""The Lua scripts: their loader, and the contract each one keeps with its callers.

A script is a ``.lua`` file: the store's in ``hookline/store/lua/``, the broker's (the ones
only the transport runs) in ``hookline/transport/lua/``. Its header declares what it takes,
one line per name, in order::

    -- KEYS[1]  records      the unacked records
    -- ARGV[1]  member       the message's member in KEYS[1]
    -- ARGV[2]  ordering_key?  (optional: given or not, after the others)
    -- ARGV[3...]  *ids      (variadic: any number of values, after the others)

and a :class:`Contract` declares the same names once in Python (``hookline/store/lua/`` and
``hookline/transport/lua/``'s ``__init__``): a caller names what it passes, and the contract
puts it in its place, refusing a name missing or unknown. ``tests/unit/test_lua_contracts.py``
checks every script's header against its contract, and that the script reads no KEYS or ARGV
it does not declare. The anchor: Dramatiq's ``dispatch.lua`` declares its arguments once, and
``RedisBroker._dispatch`` builds them in one place.

A line ``--#include piece_<name>.lua`` in a script is replaced by that piece's text (the rules
several scripts share, or one concern of a long script). A piece reads no KEYS or ARGV: the
script passes it what it needs.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError

from hookline.store.connection import call_script

#: The store's scripts, and the pieces every script may include.
STORE_SCRIPTS = "hookline.store.lua"

#: A line ``--#include piece_<name>.lua`` in a script is replaced by that piece's text.
_INCLUDE = re.compile(r"^--#include[ \t]+(\S+)[ \t]*$", re.MULTILINE)
#: A name in a contract: ``records``, ``ordering_key?`` (optional), ``*ids`` (variadic).
_NAME = re.compile(r"(\*?)([a-z][a-z0-9_]*)(\??)")


@functools.cache
def load_script(name: str, folder: str = STORE_SCRIPTS) -> str:
    """The text of ``<name>.lua`` in the package ``folder`` (the store's by default),
    composed: every ``--#include <piece>`` line is replaced by the text of that piece, from
    the script's own folder or else the store's (its own includes composed too; a piece
    included twice is only written once). The store's pieces hold the rules several scripts
    share (``piece_held.lua``: whether an endpoint is held, used by admit and consume;
    ``piece_park.lua``: parking with the caps, counts and the per-endpoint index, used by
    park, consume, release and unpark; ``piece_clock.lua``: Redis time)."""
    return _compose(folder, f"{name}.lua", set())


def _compose(folder: str, filename: str, included: set[str]) -> str:
    text = resources.files(folder).joinpath(filename).read_text(encoding="utf-8")

    def include(match: re.Match[str]) -> str:
        piece = match.group(1)
        if piece in included:
            return f"-- ({piece}: included above)"
        included.add(piece)
        home = folder if resources.files(folder).joinpath(piece).is_file() else STORE_SCRIPTS
        return f"-- >>> {piece}\n{_compose(home, piece, included).rstrip()}\n-- <<< {piece}"

    return _INCLUDE.sub(include, text)


@dataclass(frozen=True)
class Name:
    """One name of a contract: a key or an argument, ``optional`` (``name?``: given or not,
    after the required ones) or ``variadic`` (``*name``: a sequence of values, after the
    others)."""

    name: str
    optional: bool = False
    variadic: bool = False

    def __str__(self) -> str:
        return f"{'*' if self.variadic else ''}{self.name}{'?' if self.optional else ''}"


def parse_names(spec: str) -> tuple[Name, ...]:
    """The names of ``spec`` (``"records queue *ids"``), in order: the required ones first,
    then the optional ones, then the variadic ones."""
    names = []
    for word in spec.split():
        match = _NAME.fullmatch(word)
        if match is None or (match.group(1) and match.group(3)):
            raise ValueError(f"not a contract name: {word!r}")
        names.append(Name(match.group(2), optional=bool(match.group(3)),
                          variadic=bool(match.group(1))))
    kinds = [2 if name.variadic else 1 if name.optional else 0 for name in names]
    if kinds != sorted(kinds):
        raise ValueError(f"required names first, then optional, then variadic: {spec!r}")
    return tuple(names)


def _plan(names: tuple[Name, ...]) -> tuple[tuple[str, ...], tuple[Name, ...]]:
    """``names`` as the names of the leading required ones (each value taken as it is: the
    quick way for the scripts a delivery runs every time) and the others."""
    plain = 0
    while plain < len(names) and not (names[plain].optional or names[plain].variadic):
        plain += 1
    return tuple(name.name for name in names[:plain]), names[plain:]


class Contract:
    """What one script takes: the names of its KEYS and of its ARGV, in order.

    ``script``: the file's name without ``.lua``; ``folder``: the package holding it (the
    store's by default). ``keys`` and ``args``: the names, space-separated (``name?``
    optional, ``*name`` variadic, see :func:`parse_names`).
    """

    def __init__(self, script: str, *, keys: str = "", args: str = "",
                 folder: str = STORE_SCRIPTS) -> None:
        self.script = script
        self.folder = folder
        self.keys = parse_names(keys)
        self.args = parse_names(args)
        every = [name.name for name in (*self.keys, *self.args)]
        if len(set(every)) != len(every):
            raise ValueError(f"{script}.lua: a name twice among {every}")
        self._names = frozenset(every)
        #: Per KEYS and ARGV: the leading plain names (one required value each), then the rest.
        self._key_plan = _plan(self.keys)
        self._arg_plan = _plan(self.args)

    def __repr__(self) -> str:
        return (f"Contract({self.script!r}, keys={' '.join(map(str, self.keys))!r}, "
                f"args={' '.join(map(str, self.args))!r})")

    def text(self) -> str:
        """The script's text, its pieces included."""
        return load_script(self.script, self.folder)

    @functools.cached_property
    def sha(self) -> str:
        """The SHA1 digest Redis knows the script by (EVALSHA)."""
        return hashlib.sha1(self.text().encode()).hexdigest()

    def keys_and_args(self, **named: Any) -> tuple[list[Any], list[Any]]:
        """The script's KEYS and ARGV from ``named``, each value in its place. Raises
        TypeError for a required name missing (a variadic one included: give ``[]``), a
        name the script does not take, or a value after an optional name left out (None or
        not given): it would take that one's place."""
        keys, used = self._values(self._key_plan, named)
        args, also = self._values(self._arg_plan, named)
        if used + also != len(named):
            unknown = sorted(set(named) - self._names)
            raise TypeError(f"{self.script}.lua takes no {', '.join(unknown)}")
        return keys, args

    def _values(self, plan: tuple[tuple[str, ...], tuple[Name, ...]], named: dict[str, Any]
                ) -> tuple[list[Any], int]:
        """The values of one plan (:func:`_plan`), and how many of ``named`` it used."""
        plain, rest = plan
        try:
            values = [named[name] for name in plain]
        except KeyError as exc:
            raise TypeError(f"{self.script}.lua needs {exc.args[0]}") from None
        used = len(plain)
        left_out = None
        for name in rest:
            used += name.name in named
            value = named.get(name.name)
            if value is None:
                if not name.optional:
                    raise TypeError(f"{self.script}.lua needs {name.name}")
                left_out = left_out or name.name
            elif left_out is not None and (value or not name.variadic):
                raise TypeError(f"{self.script}.lua: {name.name} given without {left_out}")
            elif name.variadic:
                values.extend(value)
            else:
                values.append(value)
        return values, used

    def register(self, client: Any) -> Script:
        """The script registered on ``client`` (redis-py's ``register_script``)."""
        return Script(self, client)

    def run(self, client: Any, **named: Any) -> Any:
        """Run the script once on ``client`` with ``named`` (EVALSHA, the script loaded first
        when Redis does not know it)."""
        keys, args = self.keys_and_args(**named)
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            client.script_load(self.text())
            return client.evalsha(self.sha, len(keys), *keys, *args)


class Script:
    """A contract's script registered on one client, called with the contract's names."""

    def __init__(self, contract: Contract, client: Any) -> None:
        self.contract = contract
        self.registered = client.register_script(contract.text())

    def __call__(self, client: Any = None, /, **named: Any) -> Any:
        """Run it with ``named`` on ``client`` (a pipeline, or another client of the same
        Redis), by default on the one it is registered on."""
        keys, args = self.contract.keys_and_args(**named)
        return self.registered(keys=keys, args=args, client=client)

    def call(self, **named: Any) -> Any:
        """Run it with ``named`` the quick way (``call_script``: the scripts a delivery runs
        every time)."""
        keys, args = self.contract.keys_and_args(**named)
        return call_script(self.registered, keys, args)
