"""Zone transfers: AXFR/IXFR, TSIG, the journal, NOTIFY, and `mcsdns zone`'s zone file."""
