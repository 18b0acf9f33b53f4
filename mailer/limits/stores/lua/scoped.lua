--[[
mailguard scoped limiter: one atomic decision over every scope (recipient, domain, sender,
tenant) and every tier kind (sliding, fixed, gcra). Mirrors mailer/limits/algorithm.py step for
step, but for gcra bookings: kept in pages with summaries here and searched by skipping the pages
where nothing fits (docs/explanation/limiter.md, "Long gcra backlogs"; the memory store searches
them in one list); tests/limits/test_scoped_properties.py checks that both give identical answers. Run by
mailer/limits/stores/scoped_redis.py (on Redis Cluster: once per scope,
mailer/limits/stores/scoped_cluster.py).

The policy is compiled in: mailer/limits/stores/scoped_script.py replaces --[[SCOPES]] with one entry
per scope of the policy, recipient first: {keep_ms, shared (0/1), has_log (0/1), tiers, name} and each
tier {kind (1 sliding, 2 fixed, 3 gcra), limit, window_ms, interval_us (gcra), months (0: not a
calendar-month tier), key suffixes (":g<tier>", ":G<tier>" gcra, ":f<tier>:" fixed, "" sliding)};
--[[MAX]] with MAILGUARD_MAX_BOOKINGS. A decision with nothing booked in a gcra tier and no
shared sliding log makes one MGET and its writes: the paged gcra and shared log functions are
made only when a call needs them (paged_lib, shared_lib).

The script is assembled from the files of lua/scoped/ in the order of the PART markers below,
each holding one concern (mailer/limits/stores/scoped_script.py replaces each marker with its
file; a part uses the locals of the parts before it): setup (the policy, ARGV, shared helpers),
quick (the usual call, decided fast), read (the keys read in one MGET and checked), shared_log
(shared sliding logs), gcra_pages, gcra_search, gcra_write and gcra_store (paged gcra buckets:
pages and summaries, the search, bookings, the hash), tiers (each tier's earliest slot and room,
loading and saving), reply (release, the search over every tier, the writes and the reply).

KEYS[i]   the base key of the i-th scope named in ARGV[7], "<namespace>:{<keyed hash>}"; its
          data: <base>:l the recipient's sliding log (packed as in sliding_log.lua: base I6,
          then I4 offset and I6 tag per entry); a shared scope's sliding log (no tags,
          mailer/limits/shared_log.py): <base>:z a sorted set of ms slots, member "<ms>:<count>"
          and score <ms>, and <base>:h a hash, "n" the number of entries and "<tier>:<limit>"
          "lo,h" a hint (no booking fits that view in ms [lo, h)), read where a decision looks
          only; <base>:G<tier> a gcra tier, a hash:
          "h" "<floor µs>,<its last tag>,<bookings>,<next id>;<views>" (the bucket's arrival
          time over the emissions up to now, "0": none; the tag of the last of them when it
          alone made the floor; the view limits kept: the tier's and each share's), "i" per
          group of pages in time order the doubles id, first and last µs, bookings, pages, then
          per view the group's summary (b, g, theta: docs/explanation/limiter.md), but the last
          group's, kept in "j"; "i<id>" that group's pages the same way (id, first, last,
          bookings, summaries) but the last page's, in "k<id>"; "p<id>" a page of the bookings
          after now, I7 time (µs) and I6 tag each (pages and groups of about the cube root of
          the backlog), the last page's bytes going on in the string <base>:G<tier>:t (bookings
          appended at the end, APPENDed; dropped when that page is written whole); with nothing
          booked, <base>:g<tier> instead, the floor alone ("<floor>[,<last>]", one MGET and one
          SET, the one-timestamp rule);
          <base>:f<tier>:<window start ms> a fixed tier's count in that window.
ARGV[1]   mode: "a" acquire, "p" peek (records nothing), "r" release the mail tagged ARGV[3],
          "q" the slot (ms) the mail tagged ARGV[3] holds in the first scope's log, else 0,
          "b" acquire without looking for the tag's slot first (Cluster: the coordinator looked
          in the recipient's log), "h" the answer for a mail that holds the slot ARGV[9] (Cluster: the same mail asked
          again), recording nothing
ARGV[2]   now in epoch µs, or "" to read the server's TIME (a given time adds an hour to TTLs),
          or "t<µs>": a real time given by the caller (Redis Cluster: one clock for the calls
          to every scope of one decision), without the extra hour
ARGV[3]   the mail's 48-bit tag (0: none)
ARGV[4]   max_wait in ms (> 0 books the earliest slot at most this far away)
ARGV[5]   the kind's share in (0, 1], applied to the shared scopes' limits
ARGV[6]   the time zone's offset from UTC in ms (fixed windows align to local midnight)
ARGV[7]   which scopes this mail has keys in: their 1-based indexes, one digit each ("134")
ARGV[8]   optional, acquire and peek: not_before in epoch ms (a hold's end, or on Redis Cluster
          the slot another scope found); the slot is the earliest time at or after it that
          every scope admits
ARGV[9]   optional, release: the slot (ms) to give back (Redis Cluster, scope by scope: a scope
          of fixed or gcra tiers only keeps no log to find it in); "h": the slot the mail holds
ARGV[10]  optional: calendar-month window starts (ms) around now, "N=b1,b2,..." per month count
          N of the policy's month tiers, ";"-separated (Lua has no calendar)

Reply (a, p): {allowed, booked, at_ms, wait_ms, scope, tier, remaining...}; scope and tier are
1-based indexes of the binding tier (0: none), remaining one per tier of the present scopes.
Reply (r): 1 if the mail held a slot (now given back in every scope), else 0.
Reply (a): a shared scope's key that keeps MAX_BOOKINGS entries refuses the mail: scope set,
tier 0. Data mailguard did not write (another type, a foreign value, more than MAX_BOOKINGS
entries) is refused with an error reply "MAILGUARD_CORRUPT ..." naming the scope and the key.
]]

--[[PART setup]]
--[[PART quick]]
--[[PART read]]
--[[PART shared_log]]
--[[PART gcra_pages]]
--[[PART gcra_search]]
--[[PART gcra_write]]
--[[PART gcra_store]]
--[[PART tiers]]
--[[PART reply]]
