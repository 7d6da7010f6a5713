"""Security machinery (private): the SSRF policy and secret encryption at rest."""
