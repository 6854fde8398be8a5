"""The rule engine: rules, findings, discovery, configuration and the runner."""
