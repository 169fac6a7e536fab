-- LÖVE configuration for examples/love: a small window for the results, or headless (no
-- window, graphics, audio or input: no display or sound device needed; the results go to
-- stdout as always) when AIRLOCK_LOVE_HEADLESS=1, or when there is no display at all
-- (neither DISPLAY nor WAYLAND_DISPLAY is set).
local function headless()
  if os.getenv("AIRLOCK_LOVE_HEADLESS") == "1" then return true end
  local function set(name) return (os.getenv(name) or "") ~= "" end
  return not set("DISPLAY") and not set("WAYLAND_DISPLAY")
end

function love.conf(t)
  t.identity = "airlock-example"
  if headless() then
    t.window = false
    for _, name in ipairs({ "audio", "font", "graphics", "image", "joystick", "keyboard", "mouse",
                            "physics", "sound", "touch", "video", "window" }) do
      t.modules[name] = false
    end
    return
  end
  t.window.title = "airlock: sandbox commands while the game runs"
  t.window.width = 720
  t.window.height = 220
end
