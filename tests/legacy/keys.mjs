// N keys as npm prefixed-api-key makes them (`<prefix>_<shortToken>_<longToken>`, the short
// token kept in clear by its users' systems), one JSON object a line.
import { generateAPIKey, extractShortToken } from "prefixed-api-key";

const n = Number(process.argv[2] ?? 8);
for (let i = 0; i < n; i++) {
  const k = await generateAPIKey({ keyPrefix: "acme" });
  if (extractShortToken(k.token) !== k.shortToken) throw new Error(`short token of ${k.token}`);
  console.log(JSON.stringify({ token: k.token, lookup: k.shortToken }));
}
