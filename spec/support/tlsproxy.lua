-- A real TLS endpoint on loopback for the TLS specs: Debian's nginx, run with its own prefix
-- and configuration in a temporary directory, terminating TLS in front of an airlockd, with
-- a private CA and server certificates made here with the openssl CLI.
--   port       TLS, certificate for 127.0.0.1 / localhost (signed by the private CA)
--   wrong_port TLS, certificate for wrong.example only (same CA)
--   status_port plain HTTP stub_status (open client connections, for leak checks)
local proc = require "support.proc"

local M = {}

local q = proc.shell_quote
local write_file = proc.write_file

local function run(cmd)
  assert(proc.run(cmd .. " >/dev/null 2>&1"), "command failed: " .. cmd)
end

local function free_port()
  local socket = require "socket"
  local s = assert(socket.bind("127.0.0.1", 0))
  local _, port = s:getsockname()
  s:close()
  return tonumber(port)
end

local function listening(port)
  local socket = require "socket"
  local c = socket.tcp()
  c:settimeout(0.2)
  local ok = c:connect("127.0.0.1", port)
  c:close()
  return ok ~= nil
end

-- A CA, and a server certificate for `sans` (e.g. "IP:127.0.0.1,DNS:localhost") signed by it.
local function make_certs(dir)
  run(string.format("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj '/CN=airlock test CA' " ..
    "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign " ..
    "-keyout %s -out %s", q(dir .. "/ca.key"), q(dir .. "/ca.pem")))
  local function server_cert(name, cn, sans)
    write_file(dir .. "/" .. name .. ".ext", "subjectAltName=" .. sans .. "\n" ..
      "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    run(string.format("openssl req -newkey rsa:2048 -nodes -subj %s -keyout %s -out %s",
      q("/CN=" .. cn), q(dir .. "/" .. name .. ".key"), q(dir .. "/" .. name .. ".csr")))
    run(string.format("openssl x509 -req -in %s -CA %s -CAkey %s -CAcreateserial -days 2 " ..
      "-extfile %s -out %s", q(dir .. "/" .. name .. ".csr"), q(dir .. "/ca.pem"), q(dir .. "/ca.key"),
      q(dir .. "/" .. name .. ".ext"), q(dir .. "/" .. name .. ".pem")))
  end
  server_cert("server", "127.0.0.1", "IP:127.0.0.1,DNS:localhost")
  server_cert("wrong", "wrong.example", "DNS:wrong.example")
  -- another CA, which signed nothing here (a CA file that is not the proxy's)
  run(string.format("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj '/CN=another CA' " ..
    "-keyout %s -out %s", q(dir .. "/other-ca.key"), q(dir .. "/other-ca.pem")))
end

-- start(upstream_port) → proxy {url, wrong_url, ca, other_ca, dir, ...}
function M.start(upstream_port)
  local dir = proc.make_temp_dir()
  run("mkdir -p " .. q(dir .. "/logs") .. " " .. q(dir .. "/tmp"))
  make_certs(dir)
  local p = { dir = dir, ca = dir .. "/ca.pem", other_ca = dir .. "/other-ca.pem", port = free_port(),
              wrong_port = free_port(),
              status_port = free_port() }
  -- A TLS front for airlockd on `port` with the certificate `<cert>.pem` / `<cert>.key`.
  local function tls_server(port, cert)
    return table.concat({
      "  server {",
      "    listen 127.0.0.1:" .. port .. " ssl;",
      "    ssl_certificate " .. cert .. ".pem;",
      "    ssl_certificate_key " .. cert .. ".key;",
      "    location / { proxy_pass http://airlockd; }",
      "  }",
    }, "\n")
  end
  local conf = {
    "worker_processes 1;",
    "pid " .. dir .. "/nginx.pid;",
    "error_log " .. dir .. "/logs/error.log warn;",
    "events { worker_connections 64; }",
    "http {",
    "  access_log off;",
    "  client_body_temp_path " .. dir .. "/tmp/body;",
    "  proxy_temp_path " .. dir .. "/tmp/proxy;",
    "  fastcgi_temp_path " .. dir .. "/tmp/fastcgi;",
    "  uwsgi_temp_path " .. dir .. "/tmp/uwsgi;",
    "  scgi_temp_path " .. dir .. "/tmp/scgi;",
    "  upstream airlockd { server 127.0.0.1:" .. upstream_port .. "; keepalive 4; }",
    "  proxy_http_version 1.1;",
    "  proxy_set_header Connection \"\";",
    "  proxy_read_timeout 120s;",
    "  keepalive_timeout 60s;",
    tls_server(p.port, dir .. "/server"),
    tls_server(p.wrong_port, dir .. "/wrong"),
    "  server {",
    "    listen 127.0.0.1:" .. p.status_port .. ";",
    "    location = /status { stub_status; }",
    "  }",
    "}",
  }
  -- as root, nginx's worker would switch to nobody, who cannot read the temp directory
  if proc.output("id -u"):match("^%d+") == "0" then table.insert(conf, 1, "user root;") end
  write_file(dir .. "/nginx.conf", table.concat(conf, "\n") .. "\n")
  run(string.format("nginx -p %s -c %s -e %s -t", q(dir), q(dir .. "/nginx.conf"), q(dir .. "/logs/error.log")))
  p.pid = proc.spawn(string.format("nginx -p %s -c %s -e %s -g 'daemon off;'", q(dir), q(dir .. "/nginx.conf"),
    q(dir .. "/logs/error.log")), dir .. "/logs/stdout", dir .. "/pid")
  proc.wait_until(5, function()
    return listening(p.port) and listening(p.wrong_port) and listening(p.status_port)
  end, 0.05)
  assert(listening(p.port), "nginx did not start: " .. (proc.read_file(dir .. "/logs/error.log") or ""))
  p.url = "https://127.0.0.1:" .. p.port
  p.localhost_url = "https://localhost:" .. p.port
  p.wrong_url = "https://127.0.0.1:" .. p.wrong_port
  return p
end

-- Client connections nginx has open, not counting the one asking.
function M.active_connections(p)
  local http = require "socket.http"
  local body = http.request("http://127.0.0.1:" .. p.status_port .. "/status")
  local n = tonumber((body or ""):match("Active connections:%s*(%d+)"))
  assert(n, "no stub_status answer: " .. tostring(body))
  return n - 1
end

-- Stops nginx (SIGKILL after 5 s) and removes its directory.
function M.stop(p)
  proc.stop_server(p, 5)
end

return M
