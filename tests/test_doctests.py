"""Every docstring example of nqm runs and prints what it shows (``tests/doctests.py``), and every main
entry point has one."""

import doctest

import doctests


def test_every_entry_point_has_an_example():
    assert not doctests.without_examples()


def test_every_entry_point_says_what_it_takes_returns_and_raises():
    for name in doctests.ENTRY_POINTS:
        text = doctests.resolve(name).__doc__
        assert all(f"\n    {section}:\n" in text for section in ("Args", "Returns", "Raises")), name


def test_every_example_of_the_package_passes():
    failed, attempted, times = doctests.run()
    assert attempted >= len(doctests.ENTRY_POINTS)
    assert failed == 0, f"{failed} of {attempted} doctest examples failed (output above)"


def test_a_wrong_output_fails():
    def shown():
        """
        >>> 1 + 1
        3
        """

    test, = doctest.DocTestFinder().find(shown, "shown")
    runner = doctest.DocTestRunner(optionflags=doctests.FLAGS)
    runner.run(test, out=lambda text: None)
    assert runner.summarize(verbose=False).failed == 1
