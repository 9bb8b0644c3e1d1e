"""One file per revision of the record's schema."""
