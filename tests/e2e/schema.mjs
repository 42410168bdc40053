// A JSON Schema check of the subset public/openapi.json uses (type, properties, required,
// additionalProperties: false, const, enum, oneOf, items, minItems, maxItems, pattern, minimum,
// maximum, format date-time, $ref into components), so a test can hold a real answer or delivery
// against the published description without another dependency.
import { readFileSync } from 'node:fs';

export const openapi = JSON.parse(readFileSync(new URL('../../public/openapi.json', import.meta.url), 'utf8'));

const typeOf = (v) => (v === null ? 'null' : Array.isArray(v) ? 'array' : Number.isInteger(v) ? 'integer' : typeof v);

/** Every way `value` breaks `schema` (an empty list when it conforms), each with its JSON path. */
export function violations(schema, value, path = '$') {
  if (schema.$ref) {
    const name = schema.$ref.replace('#/components/schemas/', '');
    return violations(openapi.components.schemas[name], value, path);
  }
  const out = [];
  const t = typeOf(value);
  if (schema.type) {
    const ok = schema.type === t || (schema.type === 'number' && (t === 'integer' || t === 'number'));
    if (!ok) return [`${path}: ${JSON.stringify(value)} is not ${schema.type}`];
  }
  if ('const' in schema && value !== schema.const) out.push(`${path}: ${JSON.stringify(value)} is not ${JSON.stringify(schema.const)}`);
  if (schema.enum && !schema.enum.includes(value)) out.push(`${path}: ${JSON.stringify(value)} is not one of ${schema.enum.join(', ')}`);
  if (schema.oneOf) {
    const matching = schema.oneOf.filter((s) => violations(s, value, path).length === 0).length;
    if (matching !== 1) out.push(`${path}: ${JSON.stringify(value)} matches ${matching} of oneOf`);
  }
  if (t === 'string') {
    if (schema.pattern && !new RegExp(schema.pattern, 'u').test(value)) out.push(`${path}: ${JSON.stringify(value)} does not match ${schema.pattern}`);
    if (schema.format === 'date-time' && Number.isNaN(Date.parse(value))) out.push(`${path}: ${value} is not a date-time`);
  }
  if (t === 'integer' || t === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) out.push(`${path}: ${value} < ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum) out.push(`${path}: ${value} > ${schema.maximum}`);
  }
  if (t === 'array') {
    if (schema.minItems !== undefined && value.length < schema.minItems) out.push(`${path}: fewer than ${schema.minItems} items`);
    if (schema.maxItems !== undefined && value.length > schema.maxItems) out.push(`${path}: more than ${schema.maxItems} items`);
    if (schema.items) value.forEach((item, i) => out.push(...violations(schema.items, item, `${path}[${i}]`)));
  }
  if (t === 'object') {
    for (const name of schema.required ?? []) if (!(name in value)) out.push(`${path}: ${name} is missing`);
    for (const [name, v] of Object.entries(value)) {
      const property = schema.properties?.[name];
      if (property) out.push(...violations(property, v, `${path}.${name}`));
      else if (schema.additionalProperties === false) out.push(`${path}: ${name} is not in the schema`);
    }
  }
  return out;
}

/**
 * How a received webhook delivery (`{headers, body}` as the harness's receiver keeps it) breaks
 * the OpenAPI `webhooks` entry of its event type: the body and every header the entry lists.
 */
export function deliveryViolations(request) {
  const body = JSON.parse(request.body);
  const entry = openapi.webhooks[body.type]?.post;
  if (!entry) return [`no webhooks entry for ${body.type}`];
  const out = violations(entry.requestBody.content['application/json'].schema, body);
  for (const p of entry.parameters) {
    const value = request.headers[p.name.toLowerCase()];
    if (value === undefined) out.push(`header ${p.name} is missing`);
    else out.push(...violations(p.schema, value, `header ${p.name}`));
  }
  return out;
}
