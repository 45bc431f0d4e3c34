// Summarises an http-cache-tests results.json using the suite's own test list and its own result
// classification (determineTestResult in the package's lib/display.mjs), imported from the installed
// package. Prints counts for required and optional ("optimal") tests, then one line per required test
// that failed (FAIL), was not classifiable as pass/fail (SETUP, HARNESS, RETRY) or had a failed
// prerequisite (DEP); writes summary.json next to results.json.
// Usage: node summarise.mjs PACKAGE_DIR results.json
import fs from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'

const [pkgDir, resultsFile] = process.argv.slice(2)
if (!pkgDir || !resultsFile) {
  console.error('usage: node summarise.mjs PACKAGE_DIR results.json')
  process.exit(2)
}
const load = async rel => import(pathToFileURL(path.resolve(pkgDir, rel)).href)

// The same suite list as the package's cli.mjs: tests/index.mjs plus Surrogate-Control.
const suites = [...(await load('tests/index.mjs')).default, (await load('tests/surrogate-control.mjs')).default]
const { determineTestResult } = await load('lib/display.mjs')
const results = JSON.parse(fs.readFileSync(resultsFile, 'utf8'))

// determineTestResult returns an entry of display.mjs's (unexported) resultTypes table;
// its third element is the console symbol, which names the class.
const classBySymbol = {
  '✅': 'passed', '⛔️': 'failed', '⚠️': 'failed', Y: 'passed', N: 'failed', '⚪️': 'dep',
  '🔹': 'setup', '⁉️': 'harness', '↻': 'retry', '-': 'untested'
}
const summary = { required: {}, optional: {}, failed: [], dep: [] }
const lines = []
for (const suite of suites) {
  for (const test of suite.tests) {
    if (test.browser_only) continue // never run by the CLI
    // determineTestResult treats a missing kind as required; 'optimal' is the suite's optional.
    const kind = { undefined: 'required', required: 'required', optimal: 'optional' }[test.kind]
    if (!kind) continue // 'check' tests (yes/no) inform the WG; not counted
    const symbol = determineTestResult(suites, test.id, results)[2]
    const cls = classBySymbol[symbol]
    if (!cls) throw new Error(`unknown result symbol ${symbol} for ${test.id}`)
    const counts = summary[kind]
    counts[cls] = (counts[cls] || 0) + 1
    if (kind !== 'required' || cls === 'passed') continue
    const message = String(results[test.id]?.[1] ?? '').replace(/\s+/g, ' ')
    if (cls === 'dep') {
      summary.dep.push(test.id)
      lines.push(`DEP ${test.id} (depends on ${test.depends_on.join(', ')})`)
    } else {
      if (cls === 'failed') summary.failed.push(test.id)
      lines.push(`${cls === 'failed' ? 'FAIL' : cls.toUpperCase()} ${test.id} ${message}`)
    }
  }
}
for (const kind of ['required', 'optional']) {
  const c = summary[kind]
  for (const k of ['passed', 'failed', 'dep']) c[k] ||= 0
  c.total = Object.entries(c).reduce((n, [k, v]) => k === 'untested' ? n : n + v, 0)
  const extra = ['setup', 'harness', 'retry', 'untested'].filter(k => c[k]).map(k => `, ${k} ${c[k]}`).join('')
  console.log(`${kind}: passed ${c.passed}, failed ${c.failed}, dependency-failed ${c.dep}, total ${c.total}${extra}`)
}
lines.sort((a, b) => a.startsWith('DEP') - b.startsWith('DEP')) // FAIL/SETUP/... first, then DEP
for (const line of lines) console.log(line)
fs.writeFileSync(path.join(path.dirname(resultsFile), 'summary.json'), JSON.stringify(summary, null, 2) + '\n')
