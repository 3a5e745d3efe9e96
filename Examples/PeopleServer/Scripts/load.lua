-- wrk script for the example server's test (Scripts/check.py): a fixed number of requests
-- per thread, a mix of reads and writes, and a log of what the server acknowledged.
--
-- Environment: SERVER (a name for the people this run creates), SEED_FIRST and SEED_COUNT
-- (the primary keys of the seeded people, all stored as age 0), REQUESTS (per thread), OUT
-- (the file the log goes to).
--
-- Mix, per 10 requests: 3 list pages, 2 gets, 2 creates, 2 patches, 1 stats. Every patch
-- expects a seeded person as seeded (age 0) and sets a random age of 1 or more, so only the
-- first patch of each person can succeed and every later one must be a 409: the check then
-- knows exactly which ages may be stored.

local threads = {}
local counter = 1

function setup(thread)
   thread:set("tid", counter)
   counter = counter + 1
   table.insert(threads, thread)
end

local server = os.getenv("SERVER") or "X"
local seedFirst = tonumber(os.getenv("SEED_FIRST") or "1")
local seedCount = tonumber(os.getenv("SEED_COUNT") or "1")
local limit = tonumber(os.getenv("REQUESTS") or "1000")
local sent = 0
log = ""

local function seed()
   return seedFirst + math.random(0, seedCount - 1)
end

local function asSeeded(key, age)
   return string.format('{"id":"Person/%d","name":"seed-%d","age":%d,"city":null,"email":null,"pets":[]}', key, key, age)
end

function init(args)
   math.randomseed(tid * 7919 + os.time())
end

function request()
   sent = sent + 1
   if sent == limit + 1 then
      -- Done: tell the check (which then stops wrk), and send nothing more.
      local marker = assert(io.open(os.getenv("OUT") .. ".done." .. tid, "w"))
      marker:close()
      wrk.thread:stop()
   end
   local kind = sent % 10
   local json = { ["Content-Type"] = "application/json" }
   if kind <= 2 then
      return wrk.format("GET", string.format("/people?minAge=%d&limit=20&offset=%d", math.random(0, 40), math.random(0, 40)))
   elseif kind <= 4 then
      return wrk.format("GET", "/people/" .. seed())
   elseif kind <= 6 then
      local body = string.format('{"name":"wrk-%s-%d-%d","age":%d}', server, tid, sent, sent % 90)
      return wrk.format("POST", "/people", json, body)
   elseif kind <= 8 then
      local key = seed()
      local body = '{"expected":' .. asSeeded(key, 0) .. ',"edited":' .. asSeeded(key, math.random(1, 1000)) .. '}'
      return wrk.format("PATCH", "/people/" .. key, json, body)
   else
      return wrk.format("GET", "/stats")
   end
end

function response(status, headers, body)
   local lines = { "S " .. status }
   if status == 201 then
      local key = string.match(body, '"id":"Person\\?/(%d+)"')
      if key then table.insert(lines, "C " .. key) end
   elseif status == 200 and not string.find(body, '"items"', 1, true) then
      -- One seeded person (a get, or an acknowledged patch): remember the age it showed.
      local key = string.match(body, '"name":"seed%-(%d+)"')
      local age = string.match(body, '"age":(%d+)')
      if key and age then table.insert(lines, "P " .. key .. " " .. age) end
   end
   log = log .. table.concat(lines, "\n") .. "\n"
end

function done(summary, latency, requests)
   local out = assert(io.open(os.getenv("OUT"), "w"))
   for _, thread in ipairs(threads) do
      out:write(thread:get("log"))
   end
   out:close()
end
