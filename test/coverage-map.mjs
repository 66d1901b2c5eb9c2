// tap's coverage map: every test file's coverage counts for src/ only (test helpers, fixtures, bench and
// scripts are not what the floors in .taprc measure). Code run from dist/ (a gateway child process)
// maps back to src/ through its source maps.
export default () => 'src/**/*.ts';
