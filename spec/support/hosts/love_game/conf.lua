-- LÖVE configuration for support.hosts.love: headless. No window, graphics, audio or input
-- modules, so LÖVE 11 runs without a display (no X server, no Xvfb) and without a sound
-- device; love.update still runs every frame (love.draw is not called).
function love.conf(t)
  t.identity = "airlock-host-harness"
  t.window = false
  for _, name in ipairs({ "audio", "font", "graphics", "image", "joystick", "keyboard", "mouse",
                          "physics", "sound", "touch", "video", "window" }) do
    t.modules[name] = false
  end
end
