"""A training package as a team ships it: installed into the image's site-packages and run by its
console script (`trainkit-train`), its frames under site-packages like any library's. Scenario
`installed_package` (tests/scenarios/run_installed.sh installs and runs it)."""
