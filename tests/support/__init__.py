"""Helpers of the test-suite (no tests here): session stories, scripted voices, store access.

Sessions are built with :class:`forge_ledger.testing.SessionBuilder`; the modules here hold the
stories several test files share, so a test reads as the story it checks.
"""
