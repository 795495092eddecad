module mcsdns.local/testbin/pause

go 1.24.0
