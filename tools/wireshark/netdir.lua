-- netdir.lua: a Wireshark dissector for netdir packets (wire/wire.go is the
-- reference; wire/nodeop.go for node ops). Load it with
--   wireshark -X lua_script:tools/wireshark/netdir.lua
--   tshark -X lua_script:tools/wireshark/netdir.lua -r capture.pcap -Y netdir
-- or copy it to ~/.local/lib/wireshark/plugins/. It decodes UDP port 7420
-- (Decode As... for another port) and flags what the Go decoder refuses as a
-- malformed-packet expert item instead of failing. Node ops' MAC trailers are
-- shown, not checked (that needs the cluster key); see the "trailer" preference.

local netdir = Proto("netdir", "netdir coherence directory")

local MAGIC, VERSION = 0x4E44, 2
local HEADER_LEN, PREFIX_LEN = 64, 68
local MAX_KEY, MAX_VALUE = 1024, 32 * 1024
local SERVICE_PORT = 7420

local ops = {
	[0x01] = "get", [0x02] = "put", [0x03] = "del", [0x04] = "vsb",
	[0x81] = "get-reply", [0x82] = "put-reply", [0x83] = "del-reply", [0xff] = "err",
	[0x20] = "chain-write", [0x21] = "chain-ack", [0x22] = "ver-query", [0x23] = "ver-answer",
	[0x24] = "copy", [0x25] = "copy-ack", [0x26] = "promote", [0x27] = "demote",
	[0x28] = "sync", [0x29] = "sync-data", [0x2a] = "stats",
}

local codes = {
	[0] = "ok", "not-found", "malformed", "unknown-op", "key-too-large", "value-too-large",
	"wrong-node", "stale-epoch", "stale-version", "retry", "queue-full", "unavailable",
	"internal", "hash-mismatch",
}

local f = netdir.fields
f.magic = ProtoField.uint16("netdir.magic", "Magic", base.HEX)
f.version = ProtoField.uint8("netdir.version", "Version")
f.op = ProtoField.uint8("netdir.op", "Op", base.HEX, ops)
f.flags = ProtoField.uint8("netdir.flags", "Flags", base.HEX)
f.flag_stale_ok = ProtoField.bool("netdir.flags.stale_ok", "Stale OK", 8, nil, 0x01)
f.flag_stamped = ProtoField.bool("netdir.flags.stamped", "Stamped", 8, nil, 0x02)
f.flag_hit = ProtoField.bool("netdir.flags.hit", "Directory hit", 8, nil, 0x04)
f.flag_reservation = ProtoField.bool("netdir.flags.reservation", "Reservation phase", 8, nil, 0x08)
f.flag_verify = ProtoField.bool("netdir.flags.verify", "Verify at the tail", 8, nil, 0x10)
f.flag_no_stamp = ProtoField.bool("netdir.flags.promote_no_stamp", "Promote without stamping", 8, nil, 0x80)
f.code = ProtoField.uint8("netdir.code", "Code", base.DEC, codes)
f.tenant = ProtoField.uint16("netdir.tenant", "Tenant")
f.reqid = ProtoField.uint64("netdir.reqid", "Request id", base.HEX)
f.keyhash = ProtoField.bytes("netdir.keyhash", "KeyHash")
f.stamp = ProtoField.uint64("netdir.stamp", "VersionStamp")
f.stamp_inc = ProtoField.uint16("netdir.stamp.incarnation", "Incarnation")
f.stamp_ver = ProtoField.uint64("netdir.stamp.version", "Version")
f.node = ProtoField.uint16("netdir.node", "Node")
f.load = ProtoField.uint16("netdir.load", "Load")
f.epoch = ProtoField.uint32("netdir.epoch", "Epoch")
f.timestamp = ProtoField.uint64("netdir.timestamp", "Timestamp (ns)")
f.delta = ProtoField.uint32("netdir.delta", "dmClock delta")
f.rho = ProtoField.uint32("netdir.rho", "dmClock rho")
f.keylen = ProtoField.uint16("netdir.keylen", "Key length")
f.vallen = ProtoField.uint16("netdir.vallen", "Value length")
f.key = ProtoField.bytes("netdir.key", "Key")
f.key_text = ProtoField.string("netdir.key_text", "Key (text)")
f.value = ProtoField.bytes("netdir.value", "Value")
f.extras = ProtoField.uint16("netdir.extra", "Extra copy node")
f.ext = ProtoField.bytes("netdir.ext", "Node-op extension")
f.ext_op = ProtoField.uint8("netdir.ext.op", "Client op", base.HEX, ops)
f.ext_promoted = ProtoField.bool("netdir.ext.promoted", "Promoted", 8, nil, 0x01)
f.ext_reservation = ProtoField.bool("netdir.ext.reservation", "Reservation phase", 8, nil, 0x02)
f.ext_addr = ProtoField.string("netdir.ext.addr", "Client address")
f.ext_absorbed = ProtoField.uint64("netdir.ext.absorbed", "Absorbed write (request id)")
f.auth = ProtoField.bytes("netdir.auth", "Authentication trailer")
f.auth_key = ProtoField.uint32("netdir.auth.key_id", "Cluster key id")
f.auth_counter = ProtoField.uint64("netdir.auth.counter", "Counter")
f.auth_mac = ProtoField.bytes("netdir.auth.mac", "HMAC-SHA256/128")
f.malformed = ProtoField.string("netdir.malformed", "Malformed")

-- A cluster with a key (netdir keygen) ends every node op in a 28-byte
-- trailer (nodeauth: key id, counter, MAC); a keyless cluster sends none.
-- The dissector cannot check a MAC without the key, so it assumes the
-- trailer where a node op has room for it; untick for a keyless capture.
local TRAILER_LEN = 28
netdir.prefs.trailer = Pref.bool("Node ops end in a MAC trailer", true,
	"Clusters with a cluster key (netdir keygen) seal every node op with a 28-byte trailer")

local ef = netdir.experts
ef.malformed = ProtoExpert.new("netdir.malformed.expert", "Malformed netdir packet",
	expert.group.MALFORMED, expert.severity.ERROR)
ef.unknown_op = ProtoExpert.new("netdir.unknown_op", "Unknown netdir op",
	expert.group.PROTOCOL, expert.severity.WARN)

local function is_node_op(op) return op >= 0x20 and op <= 0x3f end

-- flag marks the packet malformed, with the Go decoder's reason.
local function flag(tree, range, reason)
	tree:add(f.malformed, range, reason)
	tree:add_proto_expert_info(ef.malformed, reason)
end

-- node_ids adds 16-bit node ids (a promote's value, a chain-write's extras).
local function node_ids(tree, range)
	if range:len() % 2 ~= 0 then
		flag(tree, range, "node-id list of odd length")
		return
	end
	for i = 0, range:len() - 2, 2 do
		tree:add(f.extras, range(i, 2))
	end
end

-- chain_ext decodes a chain-write's extension (wire.ChainExt): op, flags,
-- the client's address (netip.AddrPort binary: the address, then the port
-- little-endian), the extras, and the writes its head's write group
-- absorbed, if any (a count of 1-31, then each one's request id and op).
-- It checks the whole extension first, as the Go decoder does, and adds
-- nothing of a malformed one.
local function chain_ext_ok(range)
	local n = range:len()
	local alen = n >= 3 and range(2, 1):uint() or 0
	if n < 3 or n < 3 + alen + 1 or not (alen == 0 or alen == 6 or alen >= 18) then
		return false
	end
	local cop, count = range(0, 1):uint(), range(3 + alen, 1):uint()
	local rest = n - (3 + alen + 1) - 2 * count
	if rest < 0 or not (cop == 0x02 or cop == 0x03) then
		return false
	end
	if rest == 0 then
		return true
	end
	local at = n - rest
	local m = range(at, 1):uint()
	if m < 1 or m > 31 or rest ~= 1 + 9 * m then
		return false
	end
	for i = 0, m - 1 do
		local wop = range(at + 1 + 9 * i + 8, 1):uint()
		if wop ~= 0x02 and wop ~= 0x03 then
			return false
		end
	end
	return true
end

local function chain_ext(tree, range)
	if not chain_ext_ok(range) then
		flag(tree, range, "malformed chain-write extension")
		return
	end
	local n = range:len()
	local alen = range(2, 1):uint()
	local count = range(3 + alen, 1):uint()
	local at = 3 + alen + 1 + 2 * count
	tree:add(f.ext_op, range(0, 1))
	tree:add(f.ext_promoted, range(1, 1))
	tree:add(f.ext_reservation, range(1, 1))
	if alen >= 6 then
		local port = range(3 + alen - 2, 2):le_uint()
		local addr = alen == 6 and tostring(range(3, 4):ipv4()) or "[" .. tostring(range(3, 16):ipv6()) .. "]"
		tree:add(f.ext_addr, range(3, alen), addr .. ":" .. port)
	end
	if count > 0 then
		node_ids(tree, range(3 + alen + 1, 2 * count))
	end
	if at < n then
		for i = 0, range(at, 1):uint() - 1 do
			tree:add(f.ext_absorbed, range(at + 1 + 9 * i, 8))
		end
	end
end

function netdir.dissector(tvb, pinfo, tree)
	local len = tvb:len()
	pinfo.cols.protocol = "netdir"
	local t = tree:add(netdir, tvb(), "netdir")
	if len < HEADER_LEN then
		flag(t, tvb(), "packet shorter than its header")
		pinfo.cols.info = "netdir malformed: short"
		return len
	end
	local magic = tvb(0, 2):uint()
	local version = tvb(2, 1):uint()
	t:add(f.magic, tvb(0, 2))
	t:add(f.version, tvb(2, 1))
	if magic ~= MAGIC then
		flag(t, tvb(0, 2), "bad magic")
		pinfo.cols.info = "netdir malformed: bad magic"
		return len
	end
	if version ~= VERSION then
		flag(t, tvb(2, 1), "unsupported version")
		pinfo.cols.info = "netdir malformed: version " .. version
		return len
	end

	local op = tvb(3, 1):uint()
	local opname = ops[op] or string.format("op(0x%x)", op)
	local opitem = t:add(f.op, tvb(3, 1))
	if not ops[op] then
		opitem:add_proto_expert_info(ef.unknown_op)
	end
	local fl = t:add(f.flags, tvb(4, 1))
	for _, bit in ipairs({f.flag_stale_ok, f.flag_stamped, f.flag_hit, f.flag_reservation, f.flag_verify, f.flag_no_stamp}) do
		fl:add(bit, tvb(4, 1))
	end
	-- The rest of the header: field, offset, size (wire.go's table).
	for _, h in ipairs({{f.code, 5, 1}, {f.tenant, 6, 2}, {f.reqid, 8, 8}, {f.keyhash, 16, 16}}) do
		t:add(h[1], tvb(h[2], h[3]))
	end
	local st = t:add(f.stamp, tvb(32, 8))
	st:add(f.stamp_inc, tvb(32, 2))
	st:add(f.stamp_ver, tvb(34, 6), tvb(34, 6):uint64())
	for _, h in ipairs({{f.node, 40, 2}, {f.load, 42, 2}, {f.epoch, 44, 4}, {f.timestamp, 48, 8}, {f.delta, 56, 4}, {f.rho, 60, 4}}) do
		t:add(h[1], tvb(h[2], h[3]))
	end

	local code = tvb(5, 1):uint()
	local info = string.format("%s reqid=0x%s node=%d", opname, tvb(8, 8):uint64():tohex(), tvb(40, 2):uint())
	if op >= 0x80 then
		info = info .. " code=" .. (codes[code] or tostring(code))
	end
	pinfo.cols.info = info

	if len < PREFIX_LEN then
		flag(t, tvb(HEADER_LEN), "packet shorter than its header")
		return len
	end
	local kl, vl = tvb(64, 2):uint(), tvb(66, 2):uint()
	t:add(f.keylen, tvb(64, 2))
	t:add(f.vallen, tvb(66, 2))
	local finish = PREFIX_LEN + kl + vl
	if finish > len then
		flag(t, tvb(64, 4), "key/value lengths exceed the packet")
		return len
	end
	if kl > 0 then
		local k = tvb(PREFIX_LEN, kl)
		t:add(f.key, k)
		t:add(f.key_text, k, k:string())
	end
	if vl > 0 then
		local v = tvb(PREFIX_LEN + kl, vl)
		if op == 0x26 then
			node_ids(t:add(f.value, v), v)
		else
			t:add(f.value, v)
		end
	end
	local rest = len - finish
	if is_node_op(op) then
		-- Node ops may carry an extension after the value, then the trailer.
		-- A chain-write's extension checks its own length, which tells a
		-- keyless capture's apart.
		if netdir.prefs.trailer and rest >= TRAILER_LEN and
			(op ~= 0x20 or (rest > TRAILER_LEN and chain_ext_ok(tvb(finish, rest - TRAILER_LEN))) or not chain_ext_ok(tvb(finish, rest))) then
			rest = rest - TRAILER_LEN
			local tr = tvb(finish + rest, TRAILER_LEN)
			local a = t:add(f.auth, tr)
			a:add(f.auth_key, tr(0, 4))
			a:add(f.auth_counter, tr(4, 8))
			a:add(f.auth_mac, tr(12, 16))
		end
		if op == 0x20 then
			if rest == 0 then
				flag(t, tvb(finish - 1, 1), "malformed chain-write extension")
			else
				chain_ext(t:add(f.ext, tvb(finish, rest)), tvb(finish, rest))
			end
		elseif rest > 0 then
			t:add(f.ext, tvb(finish, rest))
		end
		return len
	end
	if rest > 0 then
		flag(t, tvb(finish, rest), "bytes after the value")
	elseif kl > MAX_KEY then
		flag(t, tvb(64, 2), "key over MaxKey")
	elseif vl > MAX_VALUE then
		flag(t, tvb(66, 2), "value over MaxValue")
	end
	return len
end

DissectorTable.get("udp.port"):add(SERVICE_PORT, netdir)
