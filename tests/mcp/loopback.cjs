// Preload (node -r ./loopback.cjs): force net.Server.listen(port[, cb]) onto 127.0.0.1,
// because server-everything's streamableHttp calls app.listen(PORT) with no host (= all interfaces).
const net = require('net');
const orig = net.Server.prototype.listen;
net.Server.prototype.listen = function (...a) {
  if ((typeof a[0] === 'number' || (typeof a[0] === 'string' && /^\d+$/.test(a[0]))) && typeof a[1] !== 'string') {
    a.splice(1, 0, '127.0.0.1');
  } else if (a[0] && typeof a[0] === 'object' && a[0].port !== undefined && !a[0].host) {
    a[0] = { ...a[0], host: '127.0.0.1' };
  }
  return orig.apply(this, a);
};
