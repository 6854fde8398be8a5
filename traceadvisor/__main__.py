"""``python -m traceadvisor`` and the ``traceadvisor`` console script."""

import sys


def main() -> None:
    """Import the command line, then run it. A Ctrl-C while the imports run (typer, rich: about
    0.1 s) happens before ``cli.main`` can catch it, so it is caught here: the same one line and
    exit status 130 as a Ctrl-C during the analysis, never a traceback."""
    try:
        from traceadvisor.cli import run
    except KeyboardInterrupt:
        sys.stderr.write("traceadvisor: interrupted\n")
        raise SystemExit(130) from None
    run()


if __name__ == "__main__":
    main()
