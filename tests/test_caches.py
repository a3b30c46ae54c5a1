"""The frontier's bounded caches (``indexer_lib.fast.caches.PerSettings``): one table per settings, and
every table emptied (kept, not replaced) once they hold the limit in all."""
from indexer_lib.fast.caches import PerSettings


def test_the_tables_stay_bounded_in_all_and_keep_their_identity():
    kept = PerSettings(limit=5)
    a, b = kept.of("a"), kept.of("b")
    assert kept.of("a") is a and a == {}
    for i in range(3):
        kept.add(a, i, i * i)
    kept.add(b, "x", 1)
    kept.add(b, "y", 2)
    assert a == {0: 0, 1: 1, 2: 4} and b == {"x": 1, "y": 2} and kept.entries == 5
    assert kept.add(a, 9, 81) == 81  # the sixth entry: everything before it is forgotten
    assert a == {9: 81} and b == {} and kept.of("b") is b and kept.entries == 1
    kept.clear()
    assert kept.entries == 0 and kept.of("a") == {} and kept.of("a") is not a
