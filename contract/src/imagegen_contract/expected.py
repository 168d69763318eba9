"""expected.json, imagegen's expected-versions file: what an image was built to hold, which its checks compare with
what they find inside. Its format numbers and its shape, once, for both sides: imagegen writes it
(imagegen.render.expected.Expected, a pydantic model whose output tests/test_expected.py holds to problems() here), and
the image reads it with the standard library alone (`vlmgrpo selftest` and `vlmgrpo info` through read(), the
start-up driver check through driver_entry_problems()). A change of its shape is a new FORMAT.

Standard library only, Python 3.8: the image reads it before anything else of the trainer imports.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from imagegen_contract import inventory
from imagegen_contract.driver import is_version

# The file's format. The inventory program holds the number itself: imagegen runs its file's text alone inside images
# (python -c), where it can import nothing of this distribution, and it refuses another format.
FORMAT = inventory.EXPECTED_FORMAT
# The format of the file's "driver" entry (imagegen.matrix.drivers.DriverRequirement.as_dict), versioned on its own:
# the image's start-up check (vlmgrpo.image.driver) compares with an entry of this format only.
REQUIREMENT_FORMAT = 1

Check = Callable[[Any], bool]


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON's true is not a number


def _string(value: Any) -> bool:
    return isinstance(value, str)


def _optional(check: Check) -> Check:
    return lambda value: value is None or check(value)


def _list_of(check: Check) -> Check:
    return lambda value: isinstance(value, list) and all(check(item) for item in value)


def _object_of(check: Check) -> Check:
    return lambda value: isinstance(value, dict) and all(_string(k) and check(v) for k, v in value.items())


# key -> (what its value must be, said in problems; whether the file must have it). The keys of Expected, as JSON
# writes them; a file without "format" is format 1 (written before the number was).
_FILE: Dict[str, Tuple[str, Check, bool]] = {
    "format": ("the number %d" % FORMAT, lambda value: _integer(value) and value == FORMAT, False),
    "versions": ("an object of component key -> version or null", _object_of(_optional(_string)), True),
    "distributions": ("an object of component key -> distribution", _object_of(_string), False),
    "families": ("an object of component key -> distribution-name prefix", _object_of(_string), False),
    "labels": ("an object of component key -> label", _object_of(_string), False),
    "in_name": ("a list of component keys", _list_of(_string), False),
    "gpu_count": ("a number of GPUs or null", _optional(_integer), False),
    "cuda_archs": ("a list of compute capabilities", _list_of(_string), False),
    "driver": ("the driver entry or null", lambda value: value is None or isinstance(value, dict), False),
}
# The "driver" entry's keys, all of which it has.
_DRIVER_ENTRY: Dict[str, Tuple[str, Check]] = {
    "format": ("the number %d" % REQUIREMENT_FORMAT, lambda value: _integer(value) and value == REQUIREMENT_FORMAT),
    "cuda": ("a CUDA version", is_version),
    "min_driver": ("a driver version", is_version),
    "datacenter_branches": ("a list of driver branches", _list_of(lambda value: _string(value) and value.isdigit())),
    "compat_package": ("true or false", lambda value: isinstance(value, bool)),
}


def _shape_problems(document: Any, keys: Dict[str, Tuple[str, Check, bool]], where: str) -> List[str]:
    """Problems of an object whose keys are `keys`, each said at `where` + its key ("driver.cuda: ...")."""
    if not isinstance(document, dict):
        return ["%s: not an object" % (where.rstrip(".") or "the file")]
    found = ["%s%s: not a key of it" % (where, key) for key in sorted(set(document) - set(keys))]
    for key, (what, check, required) in keys.items():
        if key not in document:
            found += ["%s%s: missing" % (where, key)] if required else []
        elif not check(document[key]):
            found.append("%s%s: not %s" % (where, key, what))
    return found


def driver_entry_problems(entry: Any) -> List[str]:
    """Where the file's "driver" entry is not of REQUIREMENT_FORMAT's shape, each "where: what"; [] for one that is."""
    return _shape_problems(entry, {key: (what, check, True) for key, (what, check) in _DRIVER_ENTRY.items()},
                           "driver.")


def problems(document: Any) -> List[str]:
    """Where an expected.json document (as json.load reads it) is not of FORMAT's shape, each "where: what"; [] for
    one that is. The keys and JSON types Expected writes, none else."""
    found = _shape_problems(document, _FILE, "")
    if isinstance(document, dict) and isinstance(document.get("driver"), dict):
        found += driver_entry_problems(document["driver"])
    return found


def read(path: Optional[str]) -> Tuple[Optional[dict], Optional[str]]:
    """The expected file at `path` as the image reads it: (its content, None), (None, why there is none) or ({}, why it
    is unusable): inventory.read_expected's answer, and then {} where the content is not of FORMAT's shape."""
    content, problem = inventory.read_expected(path)
    wrong = problems(content) if content and not problem else []
    if wrong:
        return {}, "%s is not imagegen's expected-versions file, format %d (%s)" % (path, FORMAT, "; ".join(wrong))
    return content, problem
