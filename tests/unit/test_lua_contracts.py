"""Every Lua script's KEYS and ARGV are declared once, in its contract
(``hookline.store.lua`` and ``hookline.transport.lua``, see ``hookline.store.scripts``), and its
header says the same, one line per name (``-- KEYS[1]  records  ...``); the script reads no
KEYS or ARGV it does not declare, and reads every one it declares; a piece reads none at all
(the script passes it what it needs). And a contract builds a call from names, refusing a name
missing or unknown. No Redis: the scripts' behaviour is tests/store's."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from hookline.store import lua as store_scripts
from hookline.store.scripts import Contract, Name, load_script, parse_names
from hookline.transport import lua as broker_scripts

CONTRACTS = {contract.script: contract
             for contract in (*store_scripts.CONTRACTS, *broker_scripts.CONTRACTS)}
FOLDERS = (store_scripts.__name__, broker_scripts.__name__)
#: One declaration of a header: ``-- KEYS[1]  records  the unacked records``.
DECLARATION = re.compile(r"^-- (KEYS|ARGV)\[([^\]]+)\]\s+(\S+)")
#: A read of KEYS or ARGV in a script's code: one of them (``KEYS[3]``, ``ARGV[i + 1]``), or
#: all of them (``#ARGV``, not ``#ARGV[1]``; ``unpack(KEYS, ...)``).
INDEXED = re.compile(r"\b(KEYS|ARGV)\[([^\]]+)\]")
WHOLE = re.compile(r"(#|unpack\()\s*(KEYS|ARGV)\b(?!\s*\[)")
#: Declared names a script does not read: a key that only routes the call to its Redis
#: Cluster slot (the script names its keys from prefixes in ARGV).
ROUTING_ONLY = {("log_event", "KEYS", "slot")}


def _files() -> dict[str, tuple[str, Path]]:
    """Script or piece file name -> (its folder's package, its path)."""
    found = {}
    for folder in FOLDERS:
        for entry in resources.files(folder).iterdir():
            if entry.name.endswith(".lua"):
                assert entry.name not in found, f"{entry.name} in two folders"
                found[entry.name] = (folder, Path(str(entry)))
    return found


FILES = _files()
SCRIPTS = sorted(name[:-4] for name in FILES if not name.startswith("piece_"))
PIECES = sorted(name for name in FILES if name.startswith("piece_"))


def _header(text: str) -> list[str]:
    """The leading comment block of a script: its lines up to the first line of code."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return lines


def _code(text: str) -> str:
    """A script's code, its comments left out (no string of the scripts holds ``--``)."""
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def _declared(text: str) -> dict[str, list[tuple[str, str]]]:
    """(index, name) of each declaration of the header, per KEYS and ARGV, in order."""
    found: dict[str, list[tuple[str, str]]] = {"KEYS": [], "ARGV": []}
    for line in _header(text):
        match = DECLARATION.match(line)
        if match:
            found[match.group(1)].append((match.group(2), match.group(3)))
    return found


def test_every_script_has_one_contract_and_every_contract_a_script() -> None:
    assert sorted(CONTRACTS) == SCRIPTS
    assert len(CONTRACTS) == len(store_scripts.CONTRACTS) + len(broker_scripts.CONTRACTS)
    for name, contract in CONTRACTS.items():
        assert FILES[f"{name}.lua"][0] == contract.folder, name


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_header_declares_the_contract_s_names_in_order(name: str) -> None:
    contract = CONTRACTS[name]
    declared = _declared(FILES[f"{name}.lua"][1].read_text())
    for kind, names in (("KEYS", contract.keys), ("ARGV", contract.args)):
        assert [found for _, found in declared[kind]] == [str(one) for one in names], (
            f"{name}.lua's {kind} against {contract}")
        _check_indexes(name, kind, [index for index, _ in declared[kind]], names)


def _check_indexes(script: str, kind: str, indexes: list[str], names: tuple[Name, ...]
                   ) -> None:
    """A name's index is its place (``3``); a variadic one's ends in ``...``, and the first
    variadic one's is its place then ``...`` (``8...``)."""
    first_variadic = next((place for place, name in enumerate(names, start=1)
                           if name.variadic), None)
    for place, (index, name) in enumerate(zip(indexes, names, strict=True), start=1):
        if not name.variadic:
            assert index == str(place), f"{script}.lua: {kind}[{index}] {name} is {place}"
        elif place == first_variadic:
            assert index == f"{place}...", f"{script}.lua: {kind}[{index}] {name}: {place}..."
        else:
            assert index.endswith("..."), f"{script}.lua: {kind}[{index}] {name}"


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_script_reads_only_what_it_declares(name: str) -> None:
    contract = CONTRACTS[name]
    code = _code(FILES[f"{name}.lua"][1].read_text())
    for kind, names in (("KEYS", contract.keys), ("ARGV", contract.args)):
        fixed = [one for one in names if not one.variadic]
        variadic = len(fixed) < len(names)
        read = {index.strip() for found, index in INDEXED.findall(code) if found == kind}
        literal = {int(index) for index in read if index.isdigit()}
        assert all(index <= len(fixed) or variadic for index in literal), (
            f"{name}.lua reads {kind} {sorted(literal)}, declares {len(fixed)}")
        computed = read - {str(index) for index in literal}
        whole = {found for _, found in WHOLE.findall(code)}
        if not variadic:
            assert not computed and kind not in whole, (
                f"{name}.lua reads {kind}[{', '.join(sorted(computed))}] or all of {kind}, "
                f"which declares no variadic name")
        unread = [one.name for place, one in enumerate(fixed, start=1)
                  if place not in literal and (name, kind, one.name) not in ROUTING_ONLY]
        assert unread == [], f"{name}.lua declares {kind} {unread} and never reads them"


@pytest.mark.parametrize("piece", PIECES)
def test_a_piece_reads_no_keys_or_args(piece: str) -> None:
    code = _code(FILES[piece][1].read_text())
    assert not INDEXED.search(code) and not WHOLE.search(code), piece


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_include_is_composed(name: str) -> None:
    """A script's pieces come from its own folder or the store's; none is left out."""
    text = load_script(name, CONTRACTS[name].folder)
    assert not re.search(r"^--#include", text, re.MULTILINE), name


def test_consume_is_one_script_of_pieces_one_per_concern() -> None:
    text = CONTRACTS["consume"].text()
    for piece in ("piece_queues", "piece_unacked", "piece_lines", "piece_holding",
                  "piece_shares", "piece_held", "piece_park", "piece_order", "piece_leases"):
        assert f"-- >>> {piece}.lua" in text, piece
    own = FILES["consume.lua"][1].read_text()
    assert len(own.splitlines()) < 400


#: Where scripts run: the store and the transport, and the batch publish of prepared events
#: (the outbox's relay), which pipelines the transport's claim_push.lua.
RUNS_SCRIPTS = ("store/", "transport/", "delivery/prepared.py")
#: What running a script looks like in a module.
RUNNING = re.compile(r"register_script|\.evalsha\(|\.eval\(|load_script|"
                     r"hookline\.(?:store|transport)\.lua\b|hookline\.store\.scripts\b")


def test_no_layer_above_the_transport_runs_a_script_itself() -> None:
    """The service layer (and the worker, the faces) asks the store, which runs the script."""
    package = Path(store_scripts.__file__).parents[2]
    running = [str(path.relative_to(package)) for path in sorted(package.rglob("*.py"))
               if RUNNING.search(path.read_text())
               and not str(path.relative_to(package)).startswith(RUNS_SCRIPTS)]
    assert running == []


# -- a contract builds the call ---------------------------------------------------------------

SAMPLE = Contract("sample", keys="record leases doorbell? *indexes",
                  args="token outcome member? *ids")


def test_a_contract_puts_each_value_in_its_place() -> None:
    assert SAMPLE.keys_and_args(
        ids=["a", "b"], member="m", outcome="delivered", token="t", indexes=["i1"],
        doorbell="d", leases="l", record="r") == (
        ["r", "l", "d", "i1"], ["t", "delivered", "m", "a", "b"])


def test_an_optional_name_left_out_passes_nothing() -> None:
    assert SAMPLE.keys_and_args(record="r", leases="l", indexes=[], token="t",
                                outcome="o", member=None, ids=[]) == (["r", "l"], ["t", "o"])


def test_a_contract_refuses_a_name_missing_or_unknown() -> None:
    with pytest.raises(TypeError, match="needs leases"):
        SAMPLE.keys_and_args(record="r", indexes=[], token="t", outcome="o", ids=[])
    with pytest.raises(TypeError, match="needs ids"):
        SAMPLE.keys_and_args(record="r", leases="l", indexes=[], token="t", outcome="o")
    with pytest.raises(TypeError, match="takes no reason"):
        SAMPLE.keys_and_args(record="r", leases="l", indexes=[], token="t", outcome="o",
                             ids=[], reason="x")


def test_a_value_after_an_optional_name_left_out_is_refused() -> None:
    """It would take the place of the one left out."""
    with pytest.raises(TypeError, match="indexes given without doorbell"):
        SAMPLE.keys_and_args(record="r", leases="l", indexes=["i"], token="t", outcome="o",
                             ids=[])


def test_a_contract_s_names_are_required_then_optional_then_variadic_and_unique() -> None:
    assert parse_names("a b? *c") == (Name("a"), Name("b", optional=True),
                                      Name("c", variadic=True))
    for spec in ("a? b", "*a b", "*a b?", "*a?", "A", "a-b"):
        with pytest.raises(ValueError):
            parse_names(spec)
    with pytest.raises(ValueError, match="a name twice"):
        Contract("twice", keys="meta", args="meta")
