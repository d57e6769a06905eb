"""Hard value encodings of the binlog: DECIMAL, temporals, binary JSON, charsets."""
