"""Random edits of matrix.yaml give a valid plan or a clean MatrixError, never a traceback."""

import copy

import pytest

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from imagegen.core.errors import MatrixError, UserError

from tests.helpers import fixture_data, problems_of

BASE = fixture_data()

values = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False, width=16),
    st.sampled_from(["", "none", "2.6.0", "12.4", "3.11", "source", "devel", ">=3.9", "nvidia/cuda:x", "cpu"]),
    st.text(max_size=6), st.lists(st.sampled_from(["8.0", "2.6", 3]), max_size=3),
    st.dictionaries(st.sampled_from(["version", "build", "python", "x"]), st.sampled_from(["2.8.3", "source"]),
                    max_size=2),
)


def paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from paths(value, (*prefix, index))


ALL_PATHS = [p for p in paths(BASE) if p]


def apply(data, path, action, value):
    parent = data
    for part in path[:-1]:
        parent = parent[part]
    key = path[-1]
    if action == "delete":
        del parent[key]
    elif action == "rename" and isinstance(parent, dict):
        parent[f"{key}_x"] = parent.pop(key)
    else:
        parent[key] = value


edits = st.lists(st.tuples(st.sampled_from(ALL_PATHS), st.sampled_from(["set", "delete", "rename"]), values),
                 min_size=1, max_size=3)


@pytest.mark.slow  # 300 random matrices: 14 s here
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits)
@example([(("cuda", "11.8", "archs", 0), "set", "")])
@example([(("components",), "set", True)])
def test_random_edits_never_raise_anything_but_a_matrix_error(edit_list):
    data = copy.deepcopy(BASE)
    for path, action, value in edit_list:
        try:
            apply(data, path, action, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit removed or replaced this path
    try:
        problems = problems_of(data)
    except UserError as error:
        assert not isinstance(error, MatrixError) and str(error)
        return
    for problem in problems:
        assert problem.line >= 1 and problem.key and problem.message and problem.rule
