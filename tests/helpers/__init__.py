"""What several test files share: learning assertions, probe environments, numpy
references, resume checks, CLI runners and small configs. Test files import from here,
never from one another."""
