-- LÖVE configuration for examples/love: a small window for the results.
function love.conf(t)
  t.identity = "airlock-example"
  t.window.title = "airlock: sandbox commands while the game runs"
  t.window.width = 720
  t.window.height = 220
end
