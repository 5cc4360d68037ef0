"""What the tests share and run, but is not a test: subprocess helpers, the code distributed ranks run, and
the expected-failure lists of the OpInfo sweeps."""
