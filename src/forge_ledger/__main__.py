"""``python -m forge_ledger`` runs the CLI."""

from forge_ledger.cli import main

if __name__ == "__main__":
    main()
