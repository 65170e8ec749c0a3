"""tinyzoo: a one-layer model zoo, the smallest project that runs recall tests in CI."""
