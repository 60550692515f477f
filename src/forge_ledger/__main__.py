"""``python -m forge_ledger`` runs the CLI, as the ``forge-ledger`` script does."""

from forge_ledger._entry import main

if __name__ == "__main__":
    main()
