"""What a run tells a person: the terminal summary, JUnit XML, the HTML report."""
