-- airlock.internal.json, the one module that knows lua-cjson's quirks: empty arrays, numbers
-- written exactly, integers decoded as integers (Lua 5.3+), null kept or dropped.
local json = require "airlock.internal.json"

local math_type = rawget(math, "type")   -- Lua 5.3+
local function is_integer(v) return not math_type or math_type(v) == "integer" end

describe("airlock.internal.json", function()
  it("writes marked arrays as [] even when empty, and request pairs in order", function()
    assert.are.equal("[]", json.encode(json.array({})))
    assert.are.equal('{"b":1,"a":[],"c":null}',
      json.encode_pairs({ { "b", 1 }, { "a", json.array() }, { "c", json.null } }))
  end)

  it("writes numbers exactly (cjson's 14 digits would print 1e+15 or round)", function()
    assert.are.equal('{"id":1000000000000000}', json.encode({ id = 1e15 }))
    assert.are.equal("[9007199254740992,-7,1.5,0.1,0.3333333333333333]",
      json.encode(json.array({ 2 ^ 53, -7, 1.5, 0.1, 1 / 3 })))
    local t = { n = 1e15 }
    json.encode(t)
    assert.are.equal(1e15, t.n)   -- the caller's table is left as it was
    local text, err = json.encode({ f = print })
    assert.is_nil(text)
    assert.is_string(err)
  end)

  it("decodes integers as integers and keeps null; decode_answer drops null members", function()
    local v = json.decode('{"a":3,"b":null,"c":[1.5,2,{"d":null}]}')
    assert.is_true(is_integer(v.a))
    assert.is_true(is_integer(v.c[2]))
    assert.are.equal(1.5, v.c[1])
    assert.are.equal(json.null, v.b)
    assert.are.equal(json.null, v.c[3].d)
    local ok, answer = json.decode_answer('{"a":3,"b":null,"c":[null,{"d":null}]}')
    assert.is_true(ok)
    assert.is_nil(answer.b)
    assert.are.equal(json.null, answer.c[1])   -- array elements stay (positions matter)
    assert.is_nil(answer.c[2].d)
    assert.is_false(json.decode_answer("not json"))
    assert.is_false(json.decode_answer(""))
    assert.is_nil(json.decode("{"))
  end)

  it("tells arrays from objects", function()
    assert.is_true(json.is_array(json.array({})))
    assert.is_true(json.is_array({ 1 }))
    assert.is_false(json.is_array({ a = 1 }))
    assert.is_false(json.is_array("x"))
  end)
end)
