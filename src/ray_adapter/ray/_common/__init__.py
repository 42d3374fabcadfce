"""``ray._common``: Ray's shared internals; the adapter serves only ``ray._common.test_utils``
(the test helpers Ray's own test files and libraries' tests import)."""
