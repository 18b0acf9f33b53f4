"""The limiter: policies, the exact multi-tier algorithms, decisions and their stores."""
