"""fast.collector: no cyclic collection inside a dashboard change, one pass over what it made."""
import gc
import weakref

from indexer_lib.fast.collector import young_only


class Node:
    pass


def cycle() -> weakref.ref:
    node = Node()
    node.me = node  # only the cyclic collector frees it
    return weakref.ref(node)


def test_young_only_collects_what_the_block_made_and_hands_everything_back():
    gc.collect()  # a clean start: no collection falls due within the next few allocations
    old = cycle()  # garbage from before the block: set aside, found by a later full pass
    with young_only():
        assert not gc.isenabled() and gc.get_freeze_count() > 0
        young = cycle()
        assert young() is not None  # no collection inside the block
    assert young() is None  # the pass at its end found it
    assert gc.isenabled() and gc.get_freeze_count() == 0
    assert old() is not None
    gc.collect()
    assert old() is None


def test_young_only_leaves_a_disabled_collector_disabled():
    gc.disable()
    try:
        with young_only():
            young = cycle()
        assert not gc.isenabled() and young() is not None and gc.get_freeze_count() == 0
    finally:
        gc.enable()
        gc.collect()
