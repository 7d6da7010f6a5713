"""The database edge (private): connections, error translation and the SQL registry."""
